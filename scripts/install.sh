#!/usr/bin/env bash
# Installs the servers the tests run against, if they are missing:
# redis-server (single instance, Redlock masters, Cluster), ZooKeeper and
# PostgreSQL 15 from Debian's packages, and etcd built from the Go module
# proxy; and Debian's chromium, the headless browser lockctl's tests open
# the HTML reports in.
# For the packages it uses apt-get as root; otherwise it says what to install
# and fails. Debian's packages may start system services on install (a
# policy-rc.d forbids it, but some environments start them regardless);
# a service that this install started is stopped again, since the project
# starts its own servers on high loopback ports (scripts/services.sh).
# Nothing else is stopped: servers already running on this machine, the
# system's or anyone's, are left alone.
#
# etcd: the version tools/etcd/go.mod requires (a current release; Debian's
# etcd-server is 3.4, past its support), built with the local Go toolchain
# into .cache/etcd-<version>/etcd, where scripts/services.sh looks for it.
# LOCKER_ETCD_BIN names another etcd binary to use instead (an older
# server, say), and then nothing is built.
#
# PostgreSQL: Debian's postgresql, whose programs are in
# /usr/lib/postgresql/15/bin. LOCKER_PG_BIN names another directory of
# PostgreSQL programs to use instead, and then nothing is installed for it.
# The package creates a cluster of its own (15/main, port 5432), which is
# left in place and, should the installation have started it, stopped.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

# shellcheck source=scripts/etcd-bin.sh
. "$ROOT/scripts/etcd-bin.sh"
if [ ! -x "$ETCD_BIN" ]; then
	[ -z "${LOCKER_ETCD_BIN:-}" ] || { echo "install.sh: LOCKER_ETCD_BIN=$LOCKER_ETCD_BIN is not an executable" >&2; exit 1; }
	echo "install.sh: building etcd $ETCD_VERSION from the module proxy into $ETCD_BIN" >&2
	mkdir -p "$(dirname "$ETCD_BIN")"
	(cd "$ROOT/tools/etcd" && go build -trimpath -o "$ETCD_BIN.tmp" .)
	mv "$ETCD_BIN.tmp" "$ETCD_BIN"
fi

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v ss >/dev/null 2>&1 || missing+=(iproute2) # services.sh: who holds a port
command -v curl >/dev/null 2>&1 || missing+=(curl)   # services.sh: etcd health
command -v openssl >/dev/null 2>&1 || missing+=(openssl) # services.sh: the TLS test server's certificates
if [ -n "${LOCKER_PG_BIN:-}" ]; then
	[ -x "$LOCKER_PG_BIN/initdb" ] || { echo "install.sh: LOCKER_PG_BIN=$LOCKER_PG_BIN has no initdb" >&2; exit 1; }
else
	[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql)
fi
# cmd/lockctl's browser test; LOCKER_TEST_CHROMIUM names another browser.
[ -n "${LOCKER_TEST_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 || missing+=(chromium)

if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "install.sh: missing packages: ${missing[*]}" >&2
	echo "install.sh: run as root, or install them first: apt-get install ${missing[*]}" >&2
	exit 1
fi

echo "install.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Keep package post-install scripts from starting system services.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod +x "$policy"
	created_policy=1
fi
cleanup() { [ "$created_policy" -eq 1 ] && rm -f "$policy"; true; }
trap cleanup EXIT

# The system services the packages may start, with the pid files their
# init scripts and systemd units write (PostgreSQL's is the cluster the
# package creates, 15/main). One of them was started by this install only
# if its pid file is new (or names another pid) afterwards.
services=(redis-server:/run/redis/redis-server.pid zookeeper:/run/zookeeper/zookeeper.pid
	postgresql:/run/postgresql/15-main.pid)
read_pid() { # read_pid FILE: the pid in FILE, or nothing
	local pid
	pid=$(cat "$1" 2>/dev/null) || return 0
	pid=${pid//[[:space:]]/}
	[[ $pid =~ ^[1-9][0-9]*$ ]] && echo "$pid"
	return 0
}
declare -A pid_before=()
for entry in "${services[@]}"; do
	pid_before[$entry]=$(read_pid "${entry#*:}")
done

apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

for entry in "${services[@]}"; do
	svc=${entry%%:*}
	pid=$(read_pid "${entry#*:}")
	if [ -z "$pid" ] || [ "$pid" = "${pid_before[$entry]}" ] || ! kill -0 "$pid" 2>/dev/null; then
		continue # not running, or running before this install: not ours to stop
	fi
	echo "install.sh: stopping the $svc service (pid $pid) that the package installation started" >&2
	if [ "$svc" = postgresql ]; then
		# That cluster only: `service postgresql stop` stops every cluster.
		pg_ctlcluster 15 main stop -m fast >/dev/null 2>&1 || true
	elif command -v service >/dev/null 2>&1; then
		service "$svc" stop >/dev/null 2>&1 || true
	fi
	# If the service manager did not stop it, signal that pid itself.
	for sig in 0 TERM KILL; do
		[ "$sig" = 0 ] || kill -s "$sig" "$pid" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || continue 3
			sleep 0.1
		done
	done
	echo "install.sh: pid $pid of the $svc service did not stop" >&2
done
