#!/usr/bin/env bash
# Starts and stops the real servers the tests run against, on 127.0.0.1 high
# ports, with all state under one directory (LOCKER_SERVICES_DIR, default
# /tmp/locker-services). Nothing is mocked and nothing is installed here; see
# scripts/install.sh.
#
#   scripts/services.sh up       start whatever is not running, wait until healthy
#   scripts/services.sh down     stop everything started here, remove the directory
#   scripts/services.sh env      print the LOCKER_TEST_* variables (for eval)
#   scripts/services.sh status   show what runs
#
# Layout (ports):
#   redis single instance   27000
#   redlock masters         27001-27005 (five independent masters)
#   redis cluster           27011-27013 (three masters, no replicas; bus 27111-27113)
#   zookeeper standalone    22181
#   zookeeper ensemble      22281-22283 (quorum 22291-22293, election 22301-22303)
#   etcd single member      23379 (peer 23380)
#   etcd cluster            23479, 23579, 23679 (peers 23480, 23580, 23680)
# LOCKER_PORT_OFFSET (default 0) is added to every port, so that two sets
# of servers (two checkouts, two CI jobs) can run side by side; give each
# its own LOCKER_SERVICES_DIR too.
set -euo pipefail

DIR=${LOCKER_SERVICES_DIR:-/tmp/locker-services}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/etcd-bin.sh
. "$ROOT/scripts/etcd-bin.sh"
HOST=127.0.0.1
OFF=${LOCKER_PORT_OFFSET:-0}
[[ $OFF =~ ^[0-9]+$ ]] && [ "$OFF" -le 20000 ] || { echo "services.sh: LOCKER_PORT_OFFSET must be a number from 0 to 20000, not '$OFF'" >&2; exit 1; }
REDIS_SINGLE=$((27000 + OFF))
REDLOCK_PORTS=($((27001 + OFF)) $((27002 + OFF)) $((27003 + OFF)) $((27004 + OFF)) $((27005 + OFF)))
CLUSTER_PORTS=($((27011 + OFF)) $((27012 + OFF)) $((27013 + OFF)))
ZK_PORT=$((22181 + OFF))
ZK_ENSEMBLE_CLIENT=($((22281 + OFF)) $((22282 + OFF)) $((22283 + OFF)))
ZK_ENSEMBLE_QUORUM=($((22291 + OFF)) $((22292 + OFF)) $((22293 + OFF)))
ZK_ENSEMBLE_ELECTION=($((22301 + OFF)) $((22302 + OFF)) $((22303 + OFF)))
ETCD_PORT=$((23379 + OFF))
ETCD_PEER=$((23380 + OFF))
ETCD_CLUSTER_CLIENT=($((23479 + OFF)) $((23579 + OFF)) $((23679 + OFF)))
ETCD_CLUSTER_PEER=($((23480 + OFF)) $((23580 + OFF)) $((23680 + OFF)))
ZK_CLASSPATH=/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-all.jar:/usr/share/java/metrics-core.jar:/usr/share/java/snappy-java.jar

log() { echo "services.sh: $*" >&2; }
die() { log "$*"; exit 1; }

alive() { # alive NAME: the process recorded in NAME.pid runs
	local pidfile="$DIR/$1.pid"
	[ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

wait_for() { # wait_for WHAT SECONDS CMD...: retry CMD until it succeeds
	local what=$1 secs=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			die "$what did not become healthy within ${secs}s (logs in $DIR)"
		fi
		sleep 0.1
	done
}

redis_ping() { [ "$(redis-cli -h $HOST -p "$1" ping 2>/dev/null)" = PONG ]; }

start_redis() { # start_redis NAME PORT [extra redis-server args]
	local name=$1 port=$2
	shift 2
	alive "$name" && return 0
	mkdir -p "$DIR/$name"
	# No persistence: tests restart nodes to simulate data loss on purpose.
	redis-server --bind $HOST --port "$port" --dir "$DIR/$name" \
		--save '' --appendonly no --protected-mode no \
		--maxmemory-policy noeviction \
		--daemonize yes --pidfile "$DIR/$name.pid" \
		--logfile "$DIR/$name/redis.log" "$@" >/dev/null
	wait_for "redis $name on :$port" 10 redis_ping "$port"
}

cluster_ok() {
	local p
	for p in "${CLUSTER_PORTS[@]}"; do
		redis-cli -h $HOST -p "$p" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || return 1
	done
}

start_cluster() {
	local p
	for p in "${CLUSTER_PORTS[@]}"; do
		# The bus port is set, not left at port+10000: that lands in the
		# kernel's range of ephemeral ports (32768 and up), where an
		# outgoing connection of the tests may hold it and the node then
		# fails to start.
		start_redis "cluster-$p" "$p" --cluster-enabled yes --cluster-port $((p + 100)) \
			--cluster-config-file nodes.conf --cluster-node-timeout 2000
	done
	cluster_ok && return 0
	local nodes=()
	for p in "${CLUSTER_PORTS[@]}"; do nodes+=("$HOST:$p"); done
	redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
		>"$DIR/cluster-create.log" 2>&1 || die "redis cluster create failed: $(tail -3 "$DIR/cluster-create.log")"
	wait_for "redis cluster" 30 cluster_ok
}

four_letter() { # four_letter PORT WORD: send a ZooKeeper four-letter command
	local out
	exec 3<>"/dev/tcp/$HOST/$1" || return 1
	printf '%s' "$2" >&3
	out=$(cat <&3)
	exec 3<&-
	printf '%s' "$out"
}

zk_ok() { [ "$(four_letter "$ZK_PORT" ruok 2>/dev/null)" = imok ] && four_letter "$ZK_PORT" srvr 2>/dev/null | grep -q 'Mode: standalone'; }

start_zookeeper() { # launches the JVM; up() waits for health
	alive zookeeper && return 0
	command -v java >/dev/null || die "java not found (run scripts/install.sh)"
	[ -f /usr/share/java/zookeeper.jar ] || die "ZooKeeper not found (run scripts/install.sh)"
	mkdir -p "$DIR/zookeeper/data"
	# tickTime 500 ms lets sessions be as short as 1 s (2 ticks), so crashed
	# holders expire quickly in tests; maxSessionTimeout allows long TTLs.
	cat >"$DIR/zookeeper/zoo.cfg" <<-CFG
		tickTime=500
		dataDir=$DIR/zookeeper/data
		clientPort=$ZK_PORT
		clientPortAddress=$HOST
		minSessionTimeout=1000
		maxSessionTimeout=120000
		maxClientCnxns=0
		admin.enableServer=false
		4lw.commands.whitelist=ruok,srvr,stat,mntr,cons
		forceSync=no
	CFG
	nohup java -Xmx256m -XX:+UseSerialGC -Dzookeeper.log.dir="$DIR/zookeeper" \
		-cp "$ZK_CLASSPATH" org.apache.zookeeper.server.ZooKeeperServerMain \
		"$DIR/zookeeper/zoo.cfg" >"$DIR/zookeeper/zookeeper.log" 2>&1 &
	echo $! >"$DIR/zookeeper.pid"
	# Not waited for here: the JVM starts while the other servers do; up()
	# checks its health last.
}

# launch_member NAME LOG: starts $DIR/NAME/run (written by the caller) in
# the background, appending its output to LOG; its pid goes to NAME.pid.
launch_member() {
	chmod +x "$DIR/$1/run"
	nohup "$DIR/$1/run" >>"$2" 2>&1 &
	echo $! >"$DIR/$1.pid"
}

# The ZooKeeper ensemble: three members on one machine, each with its own
# directory $DIR/zk-ensemble-N holding its zoo.cfg, its data and a `run`
# script that starts it in the foreground. Its pid is in zk-ensemble-N.pid.
# Tests that kill a member (the leader, found with `srvr`) restart it with
# that script and write the new pid back, so `down` still stops it.
zk_member_ok() { # zk_member_ok PORT: the member answers and has joined a quorum
	[ "$(four_letter "$1" ruok 2>/dev/null)" = imok ] &&
		four_letter "$1" srvr 2>/dev/null | grep -Eq 'Mode: (leader|follower)'
}

zk_ensemble_ok() {
	local p
	for p in "${ZK_ENSEMBLE_CLIENT[@]}"; do zk_member_ok "$p" || return 1; done
}

start_zk_ensemble() { # launches the three JVMs; up() waits for the quorum
	local i j dir
	for i in 1 2 3; do
		dir=$DIR/zk-ensemble-$i
		alive "zk-ensemble-$i" && continue
		mkdir -p "$dir/data"
		echo "$i" >"$dir/data/myid"
		# The same session settings as the standalone server; tickTime
		# 500 ms also makes elections quick after a member is killed.
		cat >"$dir/zoo.cfg" <<-CFG
			tickTime=500
			initLimit=10
			syncLimit=4
			dataDir=$dir/data
			clientPort=${ZK_ENSEMBLE_CLIENT[i - 1]}
			clientPortAddress=$HOST
			minSessionTimeout=1000
			maxSessionTimeout=120000
			maxClientCnxns=0
			admin.enableServer=false
			4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,wchp,wchc
			forceSync=no
		CFG
		for j in 1 2 3; do
			echo "server.$j=$HOST:${ZK_ENSEMBLE_QUORUM[j - 1]}:${ZK_ENSEMBLE_ELECTION[j - 1]}" >>"$dir/zoo.cfg"
		done
		cat >"$dir/run" <<-RUN
			#!/bin/sh
			exec java -Xmx256m -XX:+UseSerialGC -Dzookeeper.log.dir="$dir" -cp "$ZK_CLASSPATH" \\
				org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
		RUN
		launch_member "zk-ensemble-$i" "$dir/zookeeper.log"
	done
}

etcd_healthy() { curl -fsS "http://$HOST:$1/health" | grep -q '"health":"true"'; }
etcd_ok() { etcd_healthy "$ETCD_PORT"; }

start_etcd() {
	alive etcd && return 0
	[ -x "$ETCD_BIN" ] || die "etcd not found at $ETCD_BIN (run scripts/install.sh)"
	mkdir -p "$DIR/etcd"
	nohup "$ETCD_BIN" --name locker --data-dir "$DIR/etcd/data" \
		--listen-client-urls "http://$HOST:$ETCD_PORT" \
		--advertise-client-urls "http://$HOST:$ETCD_PORT" \
		--listen-peer-urls "http://$HOST:$ETCD_PEER" \
		--initial-advertise-peer-urls "http://$HOST:$ETCD_PEER" \
		--initial-cluster "locker=http://$HOST:$ETCD_PEER" \
		--logger zap --log-outputs stderr --log-level warn \
		>"$DIR/etcd/etcd.log" 2>&1 &
	echo $! >"$DIR/etcd.pid"
	wait_for "etcd on :$ETCD_PORT" 30 etcd_ok
}

# etcd cluster: three members, each with its directory etcd-cluster-N holding
# its data and a `run` script that starts it in the foreground with the flags
# it was created with. Its pid is in etcd-cluster-N.pid. Tests that kill a
# member (the leader) restart it with that script and write the new pid back,
# so `down` still stops it.
etcd_cluster_ok() {
	local p
	for p in "${ETCD_CLUSTER_CLIENT[@]}"; do etcd_healthy "$p" || return 1; done
}

start_etcd_cluster() { # launches the three members; up() waits for health
	local i j dir initial=""
	[ -x "$ETCD_BIN" ] || die "etcd not found at $ETCD_BIN (run scripts/install.sh)"
	for j in 1 2 3; do initial+="${initial:+,}m$j=http://$HOST:${ETCD_CLUSTER_PEER[j - 1]}"; done
	for i in 1 2 3; do
		dir=$DIR/etcd-cluster-$i
		alive "etcd-cluster-$i" && continue
		mkdir -p "$dir"
		cat >"$dir/run" <<-RUN
			#!/bin/sh
			exec "$ETCD_BIN" --name m$i --data-dir "$dir/data" \\
				--listen-client-urls http://$HOST:${ETCD_CLUSTER_CLIENT[i - 1]} \\
				--advertise-client-urls http://$HOST:${ETCD_CLUSTER_CLIENT[i - 1]} \\
				--listen-peer-urls http://$HOST:${ETCD_CLUSTER_PEER[i - 1]} \\
				--initial-advertise-peer-urls http://$HOST:${ETCD_CLUSTER_PEER[i - 1]} \\
				--initial-cluster $initial \\
				--initial-cluster-token locker-cluster-$OFF --initial-cluster-state new \\
				--logger zap --log-outputs stderr --log-level warn
		RUN
		launch_member "etcd-cluster-$i" "$dir/etcd.log"
	done
}

hosts() { # hosts PORT...: HOST:PORT,HOST:PORT,...
	local out="" p
	for p; do out+="${out:+,}$HOST:$p"; done
	echo "$out"
}

print_env() {
	local redlock cluster zkens etcdcl
	redlock=$(hosts "${REDLOCK_PORTS[@]}")
	cluster=$(hosts "${CLUSTER_PORTS[@]}")
	zkens=$(hosts "${ZK_ENSEMBLE_CLIENT[@]}")
	etcdcl=$(hosts "${ETCD_CLUSTER_CLIENT[@]}")
	cat <<-ENV
		export LOCKER_TEST_SERVICES_DIR=$DIR
		export LOCKER_TEST_REDIS_URL=redis://$HOST:$REDIS_SINGLE
		export LOCKER_TEST_REDLOCK_URL=redlock://$redlock
		export LOCKER_TEST_REDIS_CLUSTER_URL=redis://$cluster
		export LOCKER_TEST_ZK_URL=zookeeper://$HOST:$ZK_PORT
		export LOCKER_TEST_ZK_ENSEMBLE_URL=zookeeper://$zkens
		export LOCKER_TEST_ETCD_URL=etcd://$HOST:$ETCD_PORT
		export LOCKER_TEST_ETCD_CLUSTER_URL=etcd://$etcdcl
		export LOCKER_TEST_REDIS_SERVER=$(command -v redis-server)
		export LOCKER_TEST_ZK_CLASSPATH=$ZK_CLASSPATH
		export LOCKER_TEST_ETCD_BIN=$ETCD_BIN
	ENV
}

up() {
	mkdir -p "$DIR"
	command -v redis-server >/dev/null || die "redis-server not found (run scripts/install.sh)"
	# ZooKeeper's JVM takes the longest to start: launch it first, check it last.
	start_zookeeper
	start_zk_ensemble
	start_etcd
	start_etcd_cluster
	start_redis redis-single "$REDIS_SINGLE"
	local p
	for p in "${REDLOCK_PORTS[@]}"; do start_redis "redlock-$p" "$p"; done
	start_cluster
	wait_for "zookeeper on :$ZK_PORT" 60 zk_ok
	wait_for "zookeeper ensemble on :${ZK_ENSEMBLE_CLIENT[*]}" 90 zk_ensemble_ok
	wait_for "etcd cluster on :${ETCD_CLUSTER_CLIENT[*]}" 60 etcd_cluster_ok
	print_env >"$DIR/env"
	log "servers up; environment in $DIR/env"
}

stop_pidfile() { # stop_pidfile NAME: TERM, then KILL after 5 s
	local pidfile="$DIR/$1.pid" pid i
	[ -f "$pidfile" ] || return 0
	pid=$(cat "$pidfile")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for i in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
}

down() {
	[ -d "$DIR" ] || return 0
	local f
	for f in "$DIR"/*.pid; do
		[ -e "$f" ] || continue
		stop_pidfile "$(basename "$f" .pid)"
	done
	rm -rf "$DIR"
	log "servers stopped"
}

status() {
	local f name
	[ -d "$DIR" ] || { echo "no services (no $DIR)"; return 0; }
	for f in "$DIR"/*.pid; do
		[ -e "$f" ] || continue
		name=$(basename "$f" .pid)
		if alive "$name"; then echo "$name: running (pid $(cat "$f"))"; else echo "$name: dead"; fi
	done
}

case "${1:-}" in
up) up ;;
down) down ;;
env) print_env ;;
status) status ;;
*) die "usage: $0 up|down|env|status" ;;
esac
