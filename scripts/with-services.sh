#!/usr/bin/env bash
# scripts/with-services.sh CMD [ARGS...]: install what is missing, start the
# servers in a private state directory, run CMD with the LOCKER_TEST_*
# variables set and LOCKER_REQUIRE_SERVERS=1 (a test that would skip for
# lack of a server fails), and stop the servers again, even when CMD fails
# or the run is interrupted. Exits with CMD's status.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install.sh

# A private state directory per run, so a run never reuses or stops servers
# that someone else started.
export LOCKER_SERVICES_DIR=${LOCKER_SERVICES_DIR:-$(mktemp -d /tmp/locker-test.XXXXXX)}
trap 'scripts/services.sh down' EXIT
trap 'exit 130' INT TERM
scripts/services.sh up
# shellcheck disable=SC1091
source "$LOCKER_SERVICES_DIR/env"
export LOCKER_REQUIRE_SERVERS=1
status=0
"$@" || status=$?
if [ "$status" -ne 0 ]; then
	echo "with-services.sh: the servers' logs on their own slowness (none if empty):" >&2
	scripts/services.sh stalls >&2 || true
fi
exit "$status"
