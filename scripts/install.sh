#!/usr/bin/env bash
# Installs the servers the tests run against, if they are missing:
# redis-server (single instance, Redlock masters, Cluster), ZooKeeper and etcd.
# As root it uses apt-get; otherwise it says what to install and fails.
# Debian's packages start system services on install; those are stopped, since
# the project starts its own servers on high loopback ports (scripts/services.sh).
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)

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

apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

# Some environments start services regardless of policy-rc.d; stop any that did.
for svc in redis-server zookeeper etcd; do
	if command -v service >/dev/null 2>&1; then
		service "$svc" stop >/dev/null 2>&1 || true
	fi
done
pkill -x redis-server 2>/dev/null || true
pkill -x etcd 2>/dev/null || true
pkill -f 'org.apache.zookeeper.server.quorum.QuorumPeerMain' 2>/dev/null || true
