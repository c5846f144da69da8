#!/usr/bin/env bash
# make torture: the randomized fault test (internal/faulttest) on every
# backend, for longer than make test runs it, with servers started and
# stopped as make test does.
#
#   LOCKER_TORTURE_DURATION  time under faults per backend (default 3m)
#   LOCKER_TORTURE_SEEDS     how many runs, each with a fresh seed (default 1)
#   FAULTTEST_SEED           replay one seed instead (printed on a failure)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${LOCKER_TEST_IN_SERVICES:-}" ] || LOCKER_TEST_IN_SERVICES=1 exec scripts/with-services.sh "$0" "$@"

export LOCKER_TORTURE_DURATION=${LOCKER_TORTURE_DURATION:-3m}
seeds=${LOCKER_TORTURE_SEEDS:-1}
args=(-race -count=1 -timeout 0 -run 'TestFault' ./internal/faulttest/)
for i in $(seq "$seeds"); do
	echo "+ run $i of $seeds: LOCKER_TORTURE_DURATION=$LOCKER_TORTURE_DURATION go test ${args[*]} ${FAULTTEST_SEED:+-faulttest.seed=$FAULTTEST_SEED}" >&2
	go test "${args[@]}" ${FAULTTEST_SEED:+-faulttest.seed="$FAULTTEST_SEED"} "$@"
done
