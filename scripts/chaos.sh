#!/usr/bin/env bash
# The full fault matrix (make chaos): install what is missing, start the
# servers (scripts/with-services.sh), build lockctl, and run lockctl chaos
# on Redis, Redlock, ZooKeeper, etcd and PostgreSQL at once: every
# scenario, a few rounds each. The scenarios that restart servers start
# redis-servers, and PostgreSQL servers ($LOCKER_TEST_PG_BIN), of their
# own. The report goes to $LOCKER_CHAOS_OUT (default chaos-report/):
# report.json, report.md and report.html. Extra lockctl chaos flags in
# $LOCKER_CHAOS_ARGS (e.g. "--rounds 20" or "--scenario pause,failover").
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${LOCKER_TEST_IN_SERVICES:-}" ] || LOCKER_TEST_IN_SERVICES=1 exec scripts/with-services.sh "$0" "$@"

out=${LOCKER_CHAOS_OUT:-chaos-report}
echo "+ (cd cmd/lockctl && go build -o ../../lockctl .)" >&2
(cd cmd/lockctl && go build -o ../../lockctl .)
# shellcheck disable=SC2086
./lockctl chaos \
	--url "$LOCKER_TEST_REDIS_URL" \
	--url "$LOCKER_TEST_REDLOCK_URL" \
	--url "$LOCKER_TEST_ZK_URL" \
	--url "$LOCKER_TEST_ETCD_URL" \
	--url "$LOCKER_TEST_POSTGRES_URL" \
	--rounds 10 --out "$out" ${LOCKER_CHAOS_ARGS:-} "$@"
