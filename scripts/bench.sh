#!/usr/bin/env bash
# The whole comparison (make bench): install what is missing, start the
# servers (scripts/with-services.sh), build lockctl, and run lockctl bench
# on Redis, Redlock, ZooKeeper, etcd and PostgreSQL at once: every
# scenario, this library against the raw server primitives and the peer
# libraries. The report goes to $LOCKER_BENCH_OUT (default bench-report/):
# report.json, report.md and report.html. Extra lockctl bench flags in
# $LOCKER_BENCH_ARGS (e.g. "--held-locks 100000" or "--rtt 2ms").
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${LOCKER_TEST_IN_SERVICES:-}" ] || LOCKER_TEST_IN_SERVICES=1 exec scripts/with-services.sh "$0" "$@"

out=${LOCKER_BENCH_OUT:-bench-report}
echo "+ (cd cmd/lockctl && go build -o ../../lockctl .)" >&2
(cd cmd/lockctl && go build -o ../../lockctl .)
# shellcheck disable=SC2086
./lockctl bench \
	--url "$LOCKER_TEST_REDIS_URL" \
	--url "$LOCKER_TEST_REDLOCK_URL" \
	--url "$LOCKER_TEST_ZK_URL" \
	--url "$LOCKER_TEST_ETCD_URL" \
	--url "$LOCKER_TEST_POSTGRES_URL" \
	--out "$out" ${LOCKER_BENCH_ARGS:-} "$@"
