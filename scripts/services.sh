#!/usr/bin/env bash
# Starts and stops the real servers the tests run against, on 127.0.0.1 high
# ports, with all state under one directory (LOCKER_SERVICES_DIR, default
# /tmp/locker-services). Nothing is mocked and nothing is installed here; see
# scripts/install.sh.
#
#   scripts/services.sh up       start whatever is not running, wait until healthy;
#                                fails, starting nothing, if another process holds a port
#   scripts/services.sh down     stop the servers recorded in the directory's pid
#                                files (nothing else), remove what up created there
#   scripts/services.sh env      print the LOCKER_TEST_* variables (for eval)
#   scripts/services.sh status   show what runs
#   scripts/services.sh stalls   what the servers' logs say of their own slowness
#
# No server syncs its writes to disk (ZooKeeper forceSync=no, etcd
# --unsafe-no-fsync, PostgreSQL fsync=off, Redis without persistence): a
# crash of the machine may lose their data, which test servers can afford,
# and a killed server keeps what it wrote (the page cache survives it).
# On a shared machine one fsync can wait seconds behind other processes'
# writes (a build, another server), and an etcd that waits on its log
# answers no lease keepalive meanwhile: a 2 s lease then lapses under a
# test that did nothing wrong. It also keeps the benchmarks a comparison of
# the lock protocols on equal terms, not of the disk.
#
# Layout (ports):
#   redis single instance   27000
#   redlock masters         27001-27005 (five independent masters)
#   redis cluster           27011-27013 (three masters, no replicas; bus 27111-27113)
#   redis sentinel group    master 27021, replica 27022, sentinels 27031-27032
#                           (master name "locker", quorum 1)
#   redis over TLS          27041 (TLS only, client certificates required; the
#                           throwaway CA and certificates are made with openssl
#                           in $DIR/tls at start-up)
#   zookeeper standalone    22181
#   zookeeper ensemble      22281-22283 (quorum 22291-22293, election 22301-22303)
#   etcd single member      23379 (peer 23380)
#   etcd cluster            23479, 23579, 23679 (peers 23480, 23580, 23680)
#   etcd over TLS           23779 (peer 23780; client certificates required,
#                           the same certificates as redis over TLS)
#   postgresql primary      25432 (role locker owning database locker; role
#                           locker_noddl, which may create nothing in it;
#                           superuser postgres; trust authentication)
#   postgresql replica      25433 (a hot standby streaming from the primary)
# LOCKER_PORT_OFFSET (default 0) is added to every port, so that two sets
# of servers (two checkouts, two CI jobs) can run side by side; give each
# its own LOCKER_SERVICES_DIR too.
#
# PostgreSQL 15 comes from LOCKER_PG_BIN (default /usr/lib/postgresql/15/bin)
# and, since it refuses to run as root, runs as the postgres user when this
# script runs as root (that user then owns $DIR/postgres*). Each server's
# directory, $DIR/postgres and $DIR/postgres-replica, holds its data (data/),
# its log (postgres.log) and a `run` script that starts it again after a
# test killed it: run returns once the server accepts connections, with the
# postmaster's pid written to NAME.pid. $DIR/postgres-replica/promote makes
# the replica a primary and returns once it accepts writes. A PostgreSQL
# server that `up` finds not running is made afresh (initdb, or a base backup
# of the primary), and a fresh primary gets a fresh replica.
#
# Ownership: this script only ever uses, reports as running or stops a
# process whose pid it recorded in $DIR/NAME.pid (tests that restart a
# cluster member write the new pid there too), and only while that pid is
# still that server (its command is redis-server, java, etcd or postgres,
# and its command line or working directory lies under $DIR), so a
# recycled pid is never mistaken for a server. Before starting anything, `up` checks every
# port it is about to use (client, peer, quorum, election, cluster bus);
# one held by any other process -- a server someone else started, the same
# servers of another LOCKER_SERVICES_DIR, any program -- is an error that
# names the port and the process, and nothing is started. Once up, each
# port must be served by the pid recorded for it. When `up` fails it stops
# the servers it started itself. Needs ss (iproute2) to see who holds a port.
set -euo pipefail

DIR=$(realpath -m -- "${LOCKER_SERVICES_DIR:-/tmp/locker-services}")
[ "$DIR" != / ] || { echo "services.sh: LOCKER_SERVICES_DIR must not be /" >&2; exit 1; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/etcd-bin.sh
. "$ROOT/scripts/etcd-bin.sh"
HOST=127.0.0.1
OFF=${LOCKER_PORT_OFFSET:-0}
if ! [[ $OFF =~ ^[0-9]+$ ]] || [ "$OFF" -gt 20000 ]; then
	echo "services.sh: LOCKER_PORT_OFFSET must be a number from 0 to 20000, not '$OFF'" >&2
	exit 1
fi
REDIS_SINGLE=$((27000 + OFF))
REDLOCK_PORTS=($((27001 + OFF)) $((27002 + OFF)) $((27003 + OFF)) $((27004 + OFF)) $((27005 + OFF)))
CLUSTER_PORTS=($((27011 + OFF)) $((27012 + OFF)) $((27013 + OFF)))
SENTINEL_MASTER=$((27021 + OFF))
SENTINEL_REPLICA=$((27022 + OFF))
SENTINEL_PORTS=($((27031 + OFF)) $((27032 + OFF)))
SENTINEL_NAME=locker
REDIS_TLS=$((27041 + OFF))
ZK_PORT=$((22181 + OFF))
ZK_ENSEMBLE_CLIENT=($((22281 + OFF)) $((22282 + OFF)) $((22283 + OFF)))
ZK_ENSEMBLE_QUORUM=($((22291 + OFF)) $((22292 + OFF)) $((22293 + OFF)))
ZK_ENSEMBLE_ELECTION=($((22301 + OFF)) $((22302 + OFF)) $((22303 + OFF)))
ETCD_PORT=$((23379 + OFF))
ETCD_PEER=$((23380 + OFF))
ETCD_CLUSTER_CLIENT=($((23479 + OFF)) $((23579 + OFF)) $((23679 + OFF)))
ETCD_CLUSTER_PEER=($((23480 + OFF)) $((23580 + OFF)) $((23680 + OFF)))
ETCD_TLS=$((23779 + OFF))
ETCD_TLS_PEER=$((23780 + OFF))
PG_PORT=$((25432 + OFF))
PG_REPLICA_PORT=$((25433 + OFF))
PG_BIN=${LOCKER_PG_BIN:-/usr/lib/postgresql/15/bin}
ZK_CLASSPATH=/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-all.jar:/usr/share/java/metrics-core.jar:/usr/share/java/snappy-java.jar

# Every server, by the name of its pid file.
SERVICES=(zookeeper zk-ensemble-1 zk-ensemble-2 zk-ensemble-3 etcd etcd-cluster-1 etcd-cluster-2 etcd-cluster-3 etcd-tls redis-single)
for p in "${REDLOCK_PORTS[@]}"; do SERVICES+=("redlock-$p"); done
for p in "${CLUSTER_PORTS[@]}"; do SERVICES+=("cluster-$p"); done
SERVICES+=(sentinel-master sentinel-replica redis-tls)
for p in "${SENTINEL_PORTS[@]}"; do SERVICES+=("sentinel-$p"); done
SERVICES+=(postgres postgres-replica)

log() { echo "services.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# ports_of NAME: the TCP ports server NAME listens on, one "PORT ROLE" a
# line. A ZooKeeper member listens on its quorum port only while it leads.
ports_of() {
	local i
	case $1 in
	zookeeper) echo "$ZK_PORT client" ;;
	zk-ensemble-[123])
		i=$((${1#zk-ensemble-} - 1))
		echo "${ZK_ENSEMBLE_CLIENT[i]} client"
		echo "${ZK_ENSEMBLE_QUORUM[i]} quorum"
		echo "${ZK_ENSEMBLE_ELECTION[i]} election"
		;;
	etcd) echo "$ETCD_PORT client" && echo "$ETCD_PEER peer" ;;
	etcd-tls) echo "$ETCD_TLS tls" && echo "$ETCD_TLS_PEER peer" ;;
	etcd-cluster-[123])
		i=$((${1#etcd-cluster-} - 1))
		echo "${ETCD_CLUSTER_CLIENT[i]} client"
		echo "${ETCD_CLUSTER_PEER[i]} peer"
		;;
	redis-single) echo "$REDIS_SINGLE client" ;;
	redlock-*) echo "${1#redlock-} client" ;;
	cluster-*) echo "${1#cluster-} client" && echo "$((${1#cluster-} + 100)) cluster-bus" ;;
	sentinel-master) echo "$SENTINEL_MASTER client" ;;
	sentinel-replica) echo "$SENTINEL_REPLICA client" ;;
	sentinel-[0-9]*) echo "${1#sentinel-} sentinel" ;;
	redis-tls) echo "$REDIS_TLS tls" ;;
	postgres) echo "$PG_PORT client" ;;
	postgres-replica) echo "$PG_REPLICA_PORT client" ;;
	*) die "unknown server $1" ;;
	esac
}

# pid_of NAME: the pid recorded in NAME.pid, if the file holds one.
pid_of() {
	local pid
	pid=$(cat "$DIR/$1.pid" 2>/dev/null) || return 1
	pid=${pid//[[:space:]]/}
	[[ $pid =~ ^[1-9][0-9]*$ ]] || return 1
	echo "$pid"
}

# ours NAME PID: PID is server NAME as started for $DIR (by this script, or
# by a test from the run script this script wrote): its command is the
# server's and its command line or working directory lies under $DIR.
# redis-server rewrites its command line but runs in $DIR/NAME (a Sentinel
# too: it is redis-server --sentinel, in the dir its config names). A
# PostgreSQL postmaster keeps its command line, which names its data
# directory (-D).
ours() {
	local want comm cmdline cwd
	case $1 in
	zookeeper | zk-ensemble-*) want=java ;;
	etcd | etcd-cluster-* | etcd-tls) want=$(basename "$ETCD_BIN") && want=${want:0:15} ;;
	postgres | postgres-replica) want=postgres ;;
	*) want=redis-server ;;
	esac
	comm=$(cat "/proc/$2/comm" 2>/dev/null) && [ "$comm" = "$want" ] || return 1
	cmdline=$(tr '\0' ' ' <"/proc/$2/cmdline" 2>/dev/null) || return 1
	cwd=$(readlink "/proc/$2/cwd" 2>/dev/null) || cwd=
	[[ $cmdline == *"$DIR/"* || $cwd/ == "$DIR/"* ]]
}

alive() { # alive NAME: the server recorded in NAME.pid runs
	local pid
	pid=$(pid_of "$1") && running "$pid" && ours "$1" "$pid"
}

describe_pid() { # describe_pid PID: "pid PID (its command line)"
	local cmd
	cmd=$(tr -s '\0 ' '  ' <"/proc/$1/cmdline" 2>/dev/null) || cmd=
	cmd=${cmd% }
	[ -n "$cmd" ] || cmd="[$(cat "/proc/$1/comm" 2>/dev/null || echo exited)]"
	[ ${#cmd} -le 240 ] || cmd="${cmd:0:100} ... ${cmd: -120}"
	printf 'pid %s (%s)' "$1" "$cmd"
}

# port_users PORT [LISTEN]: the processes with a TCP socket on PORT at an
# address that binding $HOST:PORT collides with (127.0.0.1, a wildcard,
# ::ffff:127.0.0.1), in any state but TIME-WAIT (which SO_REUSEADDR lets a
# server bind past), or only listening with LISTEN. One "PID STATES" a line;
# PID is - when ss cannot show the process (another user's, without root).
port_users() {
	ss -Htanp "sport = :$1" | awk -v only="${2:-}" '
		$1 == "TIME-WAIT" || (only != "" && $1 != only) { next }
		{
			addr = $4
			sub(/:[0-9]+$/, "", addr)
			sub(/%.*/, "", addr)
			if (addr !~ /^(127\.0\.0\.1|0\.0\.0\.0|\*|\[::\]|\[::ffff:127\.0\.0\.1\]|\[::ffff:0\.0\.0\.0\])$/) next
			n = 0
			rest = $0
			while (match(rest, /pid=[0-9]+/)) {
				pid = substr(rest, RSTART + 4, RLENGTH - 4)
				rest = substr(rest, RSTART + RLENGTH)
				n++
				add(pid, $1)
			}
			if (n == 0) add("-", $1)
		}
		function add(pid, st) {
			if (!(pid in states)) { order[++count] = pid; states[pid] = st }
			else if (index("," states[pid] ",", "," st ",") == 0) states[pid] = states[pid] "," st
		}
		END { for (i = 1; i <= count; i++) print order[i], states[order[i]] }'
}

describe_users() { # describe_users PORT: who holds PORT, or nothing
	local pid states out=""
	while read -r pid states; do
		if [ "$pid" = - ]; then
			out+="${out:+; }a process this user cannot see ($states)"
		else
			out+="${out:+; }$(describe_pid "$pid") ($states)"
		fi
	done < <(port_users "$1")
	printf '%s' "$out"
}

# check_ports: before anything starts, every port of every server that is
# not running yet must be free; otherwise fail, naming each port taken and
# the process holding it.
check_ports() {
	local name port role users bad=()
	for name in "${SERVICES[@]}"; do
		alive "$name" && continue
		while read -r port role; do
			users=$(describe_users "$port")
			[ -z "$users" ] || bad+=("  port $port ($name $role) is held by $users")
		done < <(ports_of "$name")
	done
	[ ${#bad[@]} -eq 0 ] && return 0
	log "ports needed for $DIR are held by processes this script did not start:"
	printf '%s\n' "${bad[@]}" >&2
	die "nothing started; stop those processes, or use other ports: LOCKER_PORT_OFFSET=N (now $OFF) with a LOCKER_SERVICES_DIR of its own"
}

# verify_ports: every port (the quorum port aside: only a leader has it)
# is listened on by the pid recorded for its server, so the tests never
# talk to a server that someone else started on it.
verify_ports() {
	local name pid port role users bad=()
	for name in "${SERVICES[@]}"; do
		if ! alive "$name"; then
			bad+=("  $name is not running (its log is in $DIR/$name)")
			while read -r port role; do
				users=$(describe_users "$port")
				[ -z "$users" ] || bad+=("    its port $port ($role) is held by $users")
			done < <(ports_of "$name")
			continue
		fi
		pid=$(pid_of "$name")
		while read -r port role; do
			[ "$role" != quorum ] || continue
			port_users "$port" LISTEN | awk -v pid="$pid" '$1 == pid { found = 1 } END { exit !found }' && continue
			users=$(describe_users "$port")
			bad+=("  port $port ($name $role) is not served by $name ($(describe_pid "$pid")) but by ${users:-nothing}")
		done < <(ports_of "$name")
	done
	[ ${#bad[@]} -eq 0 ] && return 0
	log "servers are not where the tests will look for them:"
	printf '%s\n' "${bad[@]}" >&2
	die "giving up"
}

# The servers this run of `up` started; stopped again if `up` fails.
STARTED=()
UP_DONE=0
started() { STARTED+=("$1"); }
up_cleanup() {
	[ "$UP_DONE" -eq 0 ] && [ ${#STARTED[@]} -gt 0 ] || return 0
	log "stopping the servers this run started: ${STARTED[*]} (logs stay in $DIR)"
	stop_servers started-here "${STARTED[@]}"
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

TLS_CLI=() # redis-cli's arguments for the TLS server, set by make_certs
redis_tls_ping() { [ "$(redis-cli -h $HOST -p "$1" "${TLS_CLI[@]}" ping 2>/dev/null)" = PONG ]; }

start_redis() { # start_redis NAME PORT [extra redis-server args]
	local name=$1 port=$2 ping=redis_ping
	shift 2
	alive "$name" && return 0
	rm -f "$DIR/$name.pid"
	mkdir -p "$DIR/$name"
	started "$name"
	[ "$name" != redis-tls ] || ping=redis_tls_ping
	# No persistence: tests restart nodes to simulate data loss on purpose.
	redis-server --bind $HOST --port "$port" --dir "$DIR/$name" \
		--save '' --appendonly no --protected-mode no \
		--maxmemory-policy noeviction \
		--daemonize yes --pidfile "$DIR/$name.pid" \
		--logfile "$DIR/$name/redis.log" "$@" >/dev/null
	wait_for "redis $name on :$port" 10 "$ping" "$port"
}

# make_certs: a throwaway CA, and a server and a client certificate it
# signed, in $DIR/tls (kept while the TLS server that uses them runs).
# EC keys: made in milliseconds.
make_certs() {
	local t=$DIR/tls
	TLS_CLI=(--tls --cacert "$t/ca.crt" --cert "$t/client.crt" --key "$t/client.key")
	if { alive redis-tls || alive etcd-tls; } && [ -f "$t/client.key" ]; then return 0; fi
	rm -rf "$t"
	mkdir -p "$t"
	local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
	{
		openssl req -x509 "${ec[@]}" -keyout "$t/ca.key" -out "$t/ca.crt" -days 30 \
			-subj "/CN=locker test CA" &&
			openssl req -x509 "${ec[@]}" -keyout "$t/server.key" -out "$t/server.crt" -days 30 \
				-CA "$t/ca.crt" -CAkey "$t/ca.key" -subj "/CN=localhost" \
				-addext "subjectAltName=IP:$HOST,DNS:localhost" -addext "basicConstraints=CA:FALSE" &&
			openssl req -x509 "${ec[@]}" -keyout "$t/client.key" -out "$t/client.crt" -days 30 \
				-CA "$t/ca.crt" -CAkey "$t/ca.key" -subj "/CN=locker test client" \
				-addext "basicConstraints=CA:FALSE" -addext "extendedKeyUsage=clientAuth"
	} >"$DIR/tls.log" 2>&1 || die "openssl could not make the test certificates: $(tail -3 "$DIR/tls.log")"
	chmod 600 "$t"/*.key
}

start_redis_tls() {
	make_certs
	start_redis redis-tls "$REDIS_TLS" --port 0 --tls-port "$REDIS_TLS" \
		--tls-cert-file "$DIR/tls/server.crt" --tls-key-file "$DIR/tls/server.key" \
		--tls-ca-cert-file "$DIR/tls/ca.crt" --tls-auth-clients yes
}

# The Sentinel group: a master, a replica of it, and Sentinels that watch it
# under the name $SENTINEL_NAME with a quorum of 1. Each Sentinel's config
# lives in $DIR/sentinel-PORT (Sentinel rewrites it).
sentinel_ok() {
	local p
	redis-cli -h $HOST -p "$SENTINEL_REPLICA" info replication 2>/dev/null | grep -q 'master_link_status:up' || return 1
	for p in "${SENTINEL_PORTS[@]}"; do
		redis-cli -h $HOST -p "$p" sentinel get-master-addr-by-name "$SENTINEL_NAME" 2>/dev/null | grep -q . || return 1
	done
}

start_sentinels() {
	local p dir
	# Diskless sync without the default 5 s delay: the replica is in sync
	# within a second of starting.
	start_redis sentinel-master "$SENTINEL_MASTER" --repl-diskless-sync yes --repl-diskless-sync-delay 0
	start_redis sentinel-replica "$SENTINEL_REPLICA" --replicaof $HOST "$SENTINEL_MASTER"
	for p in "${SENTINEL_PORTS[@]}"; do
		dir=$DIR/sentinel-$p
		alive "sentinel-$p" && continue
		rm -f "$dir.pid"
		mkdir -p "$dir"
		# down-after 5 s: a test machine under load must not fail over by
		# mistake.
		cat >"$dir/sentinel.conf" <<-CFG
			bind $HOST
			port $p
			dir $dir
			protected-mode no
			sentinel monitor $SENTINEL_NAME $HOST $SENTINEL_MASTER 1
			sentinel down-after-milliseconds $SENTINEL_NAME 5000
			sentinel failover-timeout $SENTINEL_NAME 10000
		CFG
		started "sentinel-$p"
		redis-server "$dir/sentinel.conf" --sentinel --daemonize yes --pidfile "$dir.pid" \
			--logfile "$dir/sentinel.log" >/dev/null
	done
	wait_for "redis sentinel group on :$SENTINEL_MASTER, :$SENTINEL_REPLICA, :${SENTINEL_PORTS[*]}" 20 sentinel_ok
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
		4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,conf
		forceSync=no
	CFG
	# -Xmx1g: the held-lock benchmark keeps 100,000 locks (200,000
	# znodes, 100,000 ephemeral on one session) on this server; 256 MiB,
	# enough for everything else, runs out there.
	nohup java -Xmx1g -XX:+UseSerialGC -Dzookeeper.log.dir="$DIR/zookeeper" \
		-cp "$ZK_CLASSPATH" org.apache.zookeeper.server.ZooKeeperServerMain \
		"$DIR/zookeeper/zoo.cfg" >"$DIR/zookeeper/zookeeper.log" 2>&1 &
	echo $! >"$DIR/zookeeper.pid"
	started zookeeper
	# Not waited for here: the JVM starts while the other servers do; up()
	# checks its health last.
}

# launch_member NAME LOG: starts $DIR/NAME/run (written by the caller) in
# the background, appending its output to LOG; its pid goes to NAME.pid.
launch_member() {
	chmod +x "$DIR/$1/run"
	nohup "$DIR/$1/run" >>"$2" 2>&1 &
	echo $! >"$DIR/$1.pid"
	started "$1"
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
			4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,conf,wchp,wchc
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
etcd_tls_ok() {
	curl -fsS --cacert "$DIR/tls/ca.crt" --cert "$DIR/tls/client.crt" --key "$DIR/tls/client.key" \
		"https://$HOST:$ETCD_TLS/health" | grep -q '"health":"true"'
}

# etcd over TLS: one member, client certificates required, with the
# certificates the Redis TLS server uses.
start_etcd_tls() {
	make_certs
	alive etcd-tls && return 0
	mkdir -p "$DIR/etcd-tls"
	nohup "$ETCD_BIN" --name locker-tls --data-dir "$DIR/etcd-tls/data" \
		--listen-client-urls "https://$HOST:$ETCD_TLS" \
		--advertise-client-urls "https://$HOST:$ETCD_TLS" \
		--listen-peer-urls "http://$HOST:$ETCD_TLS_PEER" \
		--initial-advertise-peer-urls "http://$HOST:$ETCD_TLS_PEER" \
		--initial-cluster "locker-tls=http://$HOST:$ETCD_TLS_PEER" \
		--cert-file "$DIR/tls/server.crt" --key-file "$DIR/tls/server.key" \
		--trusted-ca-file "$DIR/tls/ca.crt" --client-cert-auth \
		--unsafe-no-fsync \
		--logger zap --log-outputs stderr --log-level warn \
		>"$DIR/etcd-tls/etcd.log" 2>&1 &
	echo $! >"$DIR/etcd-tls.pid"
	started etcd-tls
}

start_etcd() {
	alive etcd && return 0
	mkdir -p "$DIR/etcd"
	# History compacted every 5 minutes, as a production cluster's should
	# be: a 100,000-lock run of the held-lock benchmark writes some 200,000
	# revisions, which an uncompacted server would keep in memory.
	nohup "$ETCD_BIN" --name locker --data-dir "$DIR/etcd/data" \
		--listen-client-urls "http://$HOST:$ETCD_PORT" \
		--advertise-client-urls "http://$HOST:$ETCD_PORT" \
		--listen-peer-urls "http://$HOST:$ETCD_PEER" \
		--initial-advertise-peer-urls "http://$HOST:$ETCD_PEER" \
		--initial-cluster "locker=http://$HOST:$ETCD_PEER" \
		--auto-compaction-mode periodic --auto-compaction-retention 5m \
		--unsafe-no-fsync \
		--logger zap --log-outputs stderr --log-level warn \
		>"$DIR/etcd/etcd.log" 2>&1 &
	echo $! >"$DIR/etcd.pid"
	started etcd
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
				--unsafe-no-fsync \\
				--logger zap --log-outputs stderr --log-level warn
		RUN
		launch_member "etcd-cluster-$i" "$dir/etcd.log"
	done
}

# PostgreSQL: a primary and a hot standby streaming from it. Both listen on
# TCP only: a Unix socket's path may not exceed 107 bytes, which a deep
# $DIR would, and nothing here or in the tests needs one. No fsync and no
# full-page writes: a crash of the machine may lose these servers' data,
# which a test server can afford. synchronous_commit keeps its default
# (on): a commit returns once its WAL is written, as in production; the
# replica is asynchronous, as a plain streaming replica is.
PG_AS=()   # how PostgreSQL's programs are run: as the postgres user when root
PG_FRESH=0 # set when this run made the primary afresh

pg_user() { # pg_user: set PG_AS; PostgreSQL refuses to run as root
	[ "$(id -u)" -eq 0 ] || return 0
	id -u postgres >/dev/null 2>&1 ||
		die "PostgreSQL refuses to run as root, and there is no postgres user to run it as (run scripts/install.sh)"
	PG_AS=(runuser -u postgres --)
}

# pg_reach: the postgres user can pass through $DIR (once it exists) to
# the servers' directories. $DIR may be private to root (mktemp -d makes
# it so): it gets search permission for others, which lists nothing.
pg_reach() {
	[ ${#PG_AS[@]} -gt 0 ] || return 0
	"${PG_AS[@]}" test -x "$DIR" || chmod o+x "$DIR"
	"${PG_AS[@]}" test -x "$DIR" && return 0
	rmdir "$DIR" 2>/dev/null || true
	die "the postgres user cannot reach $DIR (a directory above it is closed to it); choose a LOCKER_SERVICES_DIR it can reach"
}

pg_run() { # pg_run NAME CMD...: CMD as PG_AS, in $DIR/NAME (not root's home)
	local name=$1
	shift
	(cd "$DIR/$name" && "${PG_AS[@]}" "$@")
}

# pg_sql PORT DB: runs the SQL on stdin as postgres on the server at PORT,
# printing results unaligned, without headers; fails on the first error.
pg_sql() {
	"$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 \
		-d "host=$HOST port=$1 user=postgres dbname=$2 sslmode=disable connect_timeout=5" -f -
}

pg_ok() { [ "$(pg_sql "$PG_PORT" postgres <<<'SELECT pg_is_in_recovery()')" = f ]; }

# pg_replica_ok: the replica is in recovery and the primary streams to it.
pg_replica_ok() {
	[ "$(pg_sql "$PG_REPLICA_PORT" postgres <<<'SELECT pg_is_in_recovery()')" = t ] &&
		[ "$(pg_sql "$PG_PORT" postgres <<<"SELECT count(*) FROM pg_stat_replication
			WHERE application_name = 'postgres-replica' AND state = 'streaming'")" = 1 ]
}

# pg_dir NAME: an empty $DIR/NAME for a server, owned by the user it runs as.
pg_dir() {
	rm -rf "${DIR:?}/$1"
	mkdir -p "$DIR/$1"
	[ ${#PG_AS[@]} -eq 0 ] || chown postgres: "$DIR/$1"
}

# pg_scripts NAME: writes $DIR/NAME/run, which starts server NAME (again)
# and returns once it accepts connections, with the postmaster's pid in
# NAME.pid, or fails showing the end of its log; and for the replica
# $DIR/NAME/promote. After a kill -9, a new postmaster refuses to start
# while the dead one's children still hold its shared memory, or while the
# dead one is a zombie (orphaned, it waits for init to reap it, which can
# take a second or two): run tries again for 10 s while no postmaster runs.
pg_scripts() {
	local dir=$DIR/$1 as=""
	[ ${#PG_AS[@]} -eq 0 ] || as="${PG_AS[*]} "
	cat >"$dir/run" <<-RUN
		#!/bin/sh
		# Starts the PostgreSQL server $1 of scripts/services.sh (see there).
		cd "$dir" || exit 1
		tries=0
		while :; do
		  out=\$(${as}"$PG_BIN/pg_ctl" start -w -t 60 -s -D "$dir/data" -l "$dir/postgres.log" 2>&1) && status=0 && break
		  status=1
		  pid=\$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null)
		  case \$(cut -d ' ' -f 3 "/proc/\$pid/stat" 2>/dev/null) in
		  '' | Z) ;;    # none runs, or the dead one awaits its parent's wait()
		  *) break ;;   # a postmaster runs: pg_ctl's failure stands
		  esac
		  tries=\$((tries + 1))
		  [ "\$tries" -lt 50 ] || break
		  sleep 0.2
		done
		pid=\$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null)
		case \$(cut -d ' ' -f 3 "/proc/\$pid/stat" 2>/dev/null) in
		'' | Z) ;;
		*) echo "\$pid" >"$DIR/$1.pid" ;;
		esac
		[ "\$status" -eq 0 ] || {
		  echo "PostgreSQL $1 did not start: \$out" >&2
		  echo "the end of $dir/postgres.log:" >&2
		  tail -n 5 "$dir/postgres.log" >&2
		}
		exit "\$status"
	RUN
	chmod +x "$dir/run"
	[ "$1" = postgres-replica ] || return 0
	cat >"$dir/promote" <<-PROMOTE
		#!/bin/sh
		# Promotes the PostgreSQL replica of scripts/services.sh to a primary.
		cd "$dir" && exec ${as}"$PG_BIN/pg_ctl" promote -w -t 60 -s -D "$dir/data"
	PROMOTE
	chmod +x "$dir/promote"
}

pg_start() { # pg_start NAME: starts server NAME with its run script
	local out
	started "$1"
	out=$("$DIR/$1/run" 2>&1) || die "$out"
}

start_postgres() {
	alive postgres && return 0
	local dir=$DIR/postgres
	rm -f "$DIR/postgres.pid"
	pg_dir postgres
	pg_run postgres "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C -N \
		>"$dir/initdb.log" 2>&1 || die "initdb failed: $(tail -3 "$dir/initdb.log")"
	cat >>"$dir/data/postgresql.conf" <<-CONF

		# scripts/services.sh: a throwaway server for the tests.
		listen_addresses = '$HOST'
		port = $PG_PORT
		unix_socket_directories = ''
		cluster_name = 'postgres'
		max_connections = 400
		wal_level = replica
		max_wal_senders = 5
		wal_keep_size = '256MB'
		hot_standby = on
		fsync = off
		full_page_writes = off
		logging_collector = off
	CONF
	cat >"$dir/data/pg_hba.conf" <<-HBA
		host all all $HOST/32 trust
		host replication all $HOST/32 trust
	HBA
	pg_scripts postgres
	pg_start postgres
	PG_FRESH=1
	# locker may create its schema in database locker, which it owns;
	# locker_noddl may create nothing there (neither a schema in the
	# database nor a table in public, which PostgreSQL 15 already denies
	# to PUBLIC): the tests check the error a role without DDL rights gets.
	pg_sql "$PG_PORT" postgres >"$dir/roles.log" 2>&1 <<-SQL || die "creating the roles failed: $(tail -3 "$dir/roles.log")"
		CREATE ROLE locker LOGIN;
		CREATE DATABASE locker OWNER locker;
		CREATE ROLE locker_noddl LOGIN;
		REVOKE CREATE ON DATABASE locker FROM PUBLIC;
		\connect locker
		REVOKE CREATE ON SCHEMA public FROM PUBLIC;
	SQL
}

# start_postgres_replica: a base backup of the primary (-R: it starts as
# a standby streaming from it), on its own port. A replica left from a
# primary made afresh, or promoted by a test, is made again.
start_postgres_replica() {
	local dir=$DIR/postgres-replica
	if alive postgres-replica; then
		[ "$PG_FRESH" -eq 1 ] || ! pg_replica_ok >/dev/null 2>&1 || return 0
		log "postgres-replica no longer replicates the primary; making it again"
		stop_servers postgres-replica
	fi
	rm -f "$DIR/postgres-replica.pid"
	pg_dir postgres-replica
	pg_run postgres-replica "$PG_BIN/pg_basebackup" -d "host=$HOST port=$PG_PORT user=postgres sslmode=disable" \
		-D "$dir/data" -R -X stream -c fast -N >"$dir/basebackup.log" 2>&1 ||
		die "pg_basebackup of the primary failed: $(tail -3 "$dir/basebackup.log")"
	cat >>"$dir/data/postgresql.conf" <<-CONF
		port = $PG_REPLICA_PORT
		cluster_name = 'postgres-replica'
	CONF
	pg_scripts postgres-replica
	pg_start postgres-replica
}

hosts() { # hosts PORT...: HOST:PORT,HOST:PORT,...
	local out="" p
	for p; do out+="${out:+,}$HOST:$p"; done
	echo "$out"
}

print_env() {
	local redlock cluster zkens etcdcl sentinels
	redlock=$(hosts "${REDLOCK_PORTS[@]}")
	cluster=$(hosts "${CLUSTER_PORTS[@]}")
	sentinels=$(hosts "${SENTINEL_PORTS[@]}")
	zkens=$(hosts "${ZK_ENSEMBLE_CLIENT[@]}")
	etcdcl=$(hosts "${ETCD_CLUSTER_CLIENT[@]}")
	cat <<-ENV
		export LOCKER_TEST_SERVICES_DIR=$DIR
		export LOCKER_TEST_REDIS_URL=redis://$HOST:$REDIS_SINGLE
		export LOCKER_TEST_REDLOCK_URL=redlock://$redlock
		export LOCKER_TEST_REDIS_CLUSTER_URL=redis://$cluster
		export LOCKER_TEST_REDIS_SENTINEL_URL=redis+sentinel://$sentinels/$SENTINEL_NAME
		export LOCKER_TEST_REDIS_TLS_URL='rediss://$HOST:$REDIS_TLS?cacert=$DIR/tls/ca.crt&cert=$DIR/tls/client.crt&key=$DIR/tls/client.key'
		export LOCKER_TEST_REDIS_TLS_DIR=$DIR/tls
		export LOCKER_TEST_ZK_URL=zookeeper://$HOST:$ZK_PORT
		export LOCKER_TEST_ZK_ENSEMBLE_URL=zookeeper://$zkens
		export LOCKER_TEST_ETCD_URL=etcd://$HOST:$ETCD_PORT
		export LOCKER_TEST_ETCD_CLUSTER_URL=etcd://$etcdcl
		export LOCKER_TEST_ETCD_TLS_URL='etcds://$HOST:$ETCD_TLS?cacert=$DIR/tls/ca.crt&cert=$DIR/tls/client.crt&key=$DIR/tls/client.key'
		export LOCKER_TEST_REDIS_SERVER=$(command -v redis-server)
		export LOCKER_TEST_ZK_CLASSPATH=$ZK_CLASSPATH
		export LOCKER_TEST_ETCD_BIN=$ETCD_BIN
		export LOCKER_TEST_POSTGRES_URL='postgres://locker@$HOST:$PG_PORT/locker?sslmode=disable'
		export LOCKER_TEST_POSTGRES_REPLICA_URL='postgres://locker@$HOST:$PG_REPLICA_PORT/locker?sslmode=disable'
		export LOCKER_TEST_POSTGRES_ADMIN_URL='postgres://postgres@$HOST:$PG_PORT/locker?sslmode=disable'
		export LOCKER_TEST_PG_BIN=$PG_BIN
	ENV
}

up() {
	command -v redis-server >/dev/null || die "redis-server not found (run scripts/install.sh)"
	command -v redis-cli >/dev/null || die "redis-cli not found (run scripts/install.sh)"
	command -v java >/dev/null || die "java not found (run scripts/install.sh)"
	[ -f /usr/share/java/zookeeper.jar ] || die "ZooKeeper not found (run scripts/install.sh)"
	[ -x "$ETCD_BIN" ] || die "etcd not found at $ETCD_BIN (run scripts/install.sh)"
	command -v curl >/dev/null || die "curl not found (run scripts/install.sh)"
	command -v ss >/dev/null || die "ss not found (package iproute2; run scripts/install.sh)"
	command -v openssl >/dev/null || die "openssl not found (run scripts/install.sh)"
	local b
	for b in initdb pg_ctl pg_basebackup psql; do
		[ -x "$PG_BIN/$b" ] || die "PostgreSQL's $b not found in $PG_BIN (run scripts/install.sh, or set LOCKER_PG_BIN)"
	done
	pg_user
	ss -Htan >/dev/null || die "ss cannot list this machine's sockets, so ports held by other processes cannot be found"
	check_ports
	mkdir -p "$DIR"
	pg_reach
	trap up_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	# ZooKeeper's JVM takes the longest to start: launch it first, check it last.
	start_zookeeper
	start_zk_ensemble
	start_etcd
	start_etcd_cluster
	start_postgres
	start_postgres_replica
	start_redis redis-single "$REDIS_SINGLE"
	local p
	for p in "${REDLOCK_PORTS[@]}"; do start_redis "redlock-$p" "$p"; done
	start_cluster
	start_redis_tls
	start_etcd_tls
	start_sentinels
	wait_for "zookeeper on :$ZK_PORT" 60 zk_ok
	wait_for "zookeeper ensemble on :${ZK_ENSEMBLE_CLIENT[*]}" 90 zk_ensemble_ok
	wait_for "etcd cluster on :${ETCD_CLUSTER_CLIENT[*]}" 60 etcd_cluster_ok
	wait_for "etcd over TLS on :$ETCD_TLS" 30 etcd_tls_ok
	wait_for "postgresql on :$PG_PORT" 30 pg_ok
	wait_for "postgresql replica on :$PG_REPLICA_PORT" 30 pg_replica_ok
	verify_ports
	print_env >"$DIR/env"
	UP_DONE=1
	trap - EXIT INT TERM
	log "servers up; environment in $DIR/env"
}

running() { # running PID: the process exists and has not exited (a zombie has)
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[ "${stat:0:1}" != Z ]
}

# stop_servers [started-here] NAME...: stops the servers recorded in the
# pid files NAME.pid if they are still those servers (TERM to all at once,
# INT to PostgreSQL, whose TERM waits for every client to disconnect; then
# KILL to any left after 10 s), and removes the pid files. With
# started-here (up stopping what it has just launched, which may not have
# exec'd into the server yet) the recorded pids are trusted.
stop_servers() {
	local trust=0 name pid pids=() names=() i
	if [ "${1:-}" = started-here ]; then trust=1 && shift; fi
	for name; do
		[ -f "$DIR/$name.pid" ] || continue
		names+=("$name")
		if ! pid=$(pid_of "$name"); then
			log "$name: $DIR/$name.pid holds no pid; removed"
		elif ! running "$pid"; then
			: # exited already
		elif [ "$trust" -eq 0 ] && ! ours "$name" "$pid"; then
			log "$name: pid $pid is no longer the server started here, left alone: $(describe_pid "$pid")"
		else
			case $name in
			postgres | postgres-replica) kill -INT "$pid" 2>/dev/null || true ;;
			*) kill "$pid" 2>/dev/null || true ;;
			esac
			pids+=("$pid")
		fi
	done
	for i in $(seq 100); do
		for pid in "${pids[@]}"; do
			if running "$pid"; then
				sleep 0.1
				continue 2
			fi
		done
		break
	done
	for pid in "${pids[@]}"; do
		running "$pid" || continue
		log "pid $pid did not stop within 10s; killing it"
		kill -9 "$pid" 2>/dev/null || true
	done
	for name in "${names[@]}"; do rm -f "$DIR/$name.pid"; done
}

# down stops the servers recorded in $DIR's pid files and removes what this
# script created there; $DIR itself goes only if nothing else is left in it.
down() {
	[ -d "$DIR" ] || return 0
	local f names=()
	for f in "$DIR"/*.pid; do
		[ -e "$f" ] && names+=("$(basename "$f" .pid)")
	done
	stop_servers "${names[@]}"
	rm -rf "$DIR/env" "$DIR/cluster-create.log" "$DIR/zookeeper" "$DIR/etcd" "$DIR/redis-single" \
		"$DIR"/redlock-[0-9]* "$DIR"/cluster-[0-9]* "$DIR"/zk-ensemble-[0-9]* "$DIR"/etcd-cluster-[0-9]* \
		"$DIR/redis-tls" "$DIR/etcd-tls" "$DIR/tls" "$DIR/tls.log" "$DIR/sentinel-master" "$DIR/sentinel-replica" "$DIR"/sentinel-[0-9]* \
		"$DIR/postgres" "$DIR/postgres-replica"
	rmdir "$DIR" 2>/dev/null || log "left $DIR in place: it holds files this script did not create"
	log "servers stopped"
}

status() {
	local f name pid
	[ -d "$DIR" ] || { echo "no services (no $DIR)"; return 0; }
	for f in "$DIR"/*.pid; do
		[ -e "$f" ] || continue
		name=$(basename "$f" .pid)
		if ! pid=$(pid_of "$name"); then
			echo "$name: no pid in $f"
		elif ours "$name" "$pid"; then
			echo "$name: running (pid $pid)"
		elif kill -0 "$pid" 2>/dev/null; then
			echo "$name: dead (pid $pid is now another process: $(describe_pid "$pid"))"
		else
			echo "$name: dead"
		fi
	done
}

# stalls: what the servers' own logs say of their slowness (etcd's slow
# disk syncs, applies and heartbeats; ZooKeeper's slow log syncs, and an
# ensemble member's elections and lost leaders), a line
# per server that logged any. with-services.sh prints it after a failed
# run: a test that timed out on a stalled server is then told apart from
# one that hung on its own.
stalls() {
	local log name
	for log in "$DIR"/*/etcd.log "$DIR"/*/zookeeper.log; do
		[ -f "$log" ] || continue
		name=$(basename "$(dirname "$log")")
		awk -v name="$name" '
			function secs(d) { # etcd durations: 1.5s, 345.6ms, 12µs
				if (d ~ /ms$/) return substr(d, 1, length(d) - 2) / 1000
				if (d ~ /µs$/) return substr(d, 1, length(d) - 3) / 1e6
				if (d ~ /s$/) return substr(d, 1, length(d) - 1) + 0
				return 0
			}
			function took(line,   m) {
				if (match(line, /"took":"[^"]*"/)) return secs(substr(line, RSTART + 8, RLENGTH - 9))
				return 0
			}
			function note(kind, t) { n[kind]++; if (t > worst[kind]) worst[kind] = t }
			/"msg":"slow fdatasync"/ { note("slow disk syncs", took($0)) }
			/"msg":"apply request took too long"/ { note("applies over 100ms", took($0)) }
			/failed to send out heartbeat on time/ { note("late heartbeats", 0) }
			/fsync-ing the write ahead log/ {
				if (match($0, /took [0-9]+ms/)) note("slow log syncs", substr($0, RSTART + 5, RLENGTH - 7) / 1000)
			}
			/Exception when following the leader/ { note("leaders lost", 0) }
			/LEADER ELECTION TOOK - [0-9]+ MS/ {
				# One at start-up; more after a member died or lost touch.
				if (match($0, /TOOK - [0-9]+ MS/)) note("elections", substr($0, RSTART + 7, RLENGTH - 10) / 1000)
			}
			END {
				out = ""
				for (k in n) out = out sprintf("%s%d %s%s", out == "" ? "" : "; ", n[k], k,
					worst[k] > 0 ? sprintf(" (worst %.2fs)", worst[k]) : "")
				if (out != "") print name ": " out
			}' "$log"
	done
}

case "${1:-}" in
up) up ;;
down) down ;;
env) print_env ;;
status) status ;;
stalls) stalls ;;
*) die "usage: $0 up|down|env|status|stalls" ;;
esac
