// Package testenv finds the real servers the tests run against.
//
// scripts/services.sh starts redis-server, ZooKeeper, etcd and PostgreSQL on
// loopback and exports their addresses as LOCKER_TEST_* variables; `make
// test` does that and sets LOCKER_REQUIRE_SERVERS=1. Without the variables a
// test that needs a server skips with a message saying how to start one; with
// LOCKER_REQUIRE_SERVERS=1 that skip is a failure instead, so a test run that
// silently tested nothing cannot pass.
package testenv

import (
	"os"
	"testing"
)

// The variables scripts/services.sh exports.
const (
	RedisURL        = "LOCKER_TEST_REDIS_URL"         // redis://host:port, one instance
	RedlockURL      = "LOCKER_TEST_REDLOCK_URL"       // redlock://h1:p1,...,h5:p5
	RedisClusterURL = "LOCKER_TEST_REDIS_CLUSTER_URL" // redis://h1:p1,h2:p2,h3:p3
	// RedisSentinelURL: redis+sentinel://s1:p1,s2:p2/locker, Sentinels
	// (quorum 1) watching a master and its replica.
	RedisSentinelURL = "LOCKER_TEST_REDIS_SENTINEL_URL"
	// RedisTLSURL: rediss://host:port?cacert=...&cert=...&key=..., a
	// server that speaks TLS only and requires a client certificate.
	RedisTLSURL = "LOCKER_TEST_REDIS_TLS_URL"
	// RedisTLSDir holds the TLS server's throwaway CA (ca.crt), its
	// certificate (server.crt, server.key) and a client certificate
	// (client.crt, client.key).
	RedisTLSDir  = "LOCKER_TEST_REDIS_TLS_DIR"
	ZooKeeperURL = "LOCKER_TEST_ZK_URL"       // zookeeper://host:port
	EtcdURL      = "LOCKER_TEST_ETCD_URL"     // etcd://host:port
	ServicesDir  = "LOCKER_TEST_SERVICES_DIR" // state directory of the servers
	RedisServer  = "LOCKER_TEST_REDIS_SERVER" // path of the redis-server binary
	ZKClasspath  = "LOCKER_TEST_ZK_CLASSPATH" // java classpath of ZooKeeper
	EtcdBin      = "LOCKER_TEST_ETCD_BIN"     // path of the etcd binary
)

// ZooKeeperEnsembleURL is the variable with the three-member ZooKeeper
// ensemble, zookeeper://h1:p1,h2:p2,h3:p3; each member's directory under
// ServicesDir (zk-ensemble-N) holds its zoo.cfg and the `run` script that
// starts it, and zk-ensemble-N.pid its pid.
const ZooKeeperEnsembleURL = "LOCKER_TEST_ZK_ENSEMBLE_URL"

// EtcdClusterURL is the variable with the three-member etcd cluster,
// etcd://h1:p1,h2:p2,h3:p3; each member's directory under ServicesDir
// (etcd-cluster-N) holds its data and the `run` script that starts it, and
// etcd-cluster-N.pid its pid.
const EtcdClusterURL = "LOCKER_TEST_ETCD_CLUSTER_URL"

// The PostgreSQL primary and its streaming replica (a hot standby).
// ServicesDir's postgres and postgres-replica hold each server's data
// (data/), log (postgres.log) and the `run` script that starts it again,
// returning once it accepts connections and writing the postmaster's pid to
// ServicesDir's postgres.pid or postgres-replica.pid; postgres-replica also
// holds `promote`, which makes the replica a primary and returns once it
// accepts writes. When the tests run as root the servers run as the
// postgres user.
const (
	// PostgresURL: postgres://locker@host:port/locker?sslmode=disable, the
	// primary as role locker, which owns database locker (and so may
	// create its schema there). Role locker_noddl may log in too and
	// create nothing: neither a schema in locker nor a table in public.
	PostgresURL = "LOCKER_TEST_POSTGRES_URL"
	// PostgresReplicaURL: the replica as role locker; it answers
	// read-only queries and is in recovery until promoted.
	PostgresReplicaURL = "LOCKER_TEST_POSTGRES_REPLICA_URL"
	// PostgresAdminURL: the primary's database locker as superuser
	// postgres. Authentication is trust: no password anywhere.
	PostgresAdminURL = "LOCKER_TEST_POSTGRES_ADMIN_URL"
	// PGBin is the directory of PostgreSQL's programs (pg_ctl, psql, ...).
	PGBin = "LOCKER_TEST_PG_BIN"
)

// Require is the variable that turns a missing server into a failure.
const Require = "LOCKER_REQUIRE_SERVERS"

// Required reports whether missing servers fail tests instead of skipping them.
func Required() bool { return os.Getenv(Require) == "1" }

// Get returns the value of the variable name. When it is unset the test
// skips, or fails when Required.
func Get(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v != "" {
		return v
	}
	msg := name + " is not set; start the servers with `make services-up` and `eval $(scripts/services.sh env)`, or run `make test`"
	if Required() {
		t.Fatalf("%s (and %s=1 forbids skipping)", msg, Require)
	}
	t.Skip(msg)
	return ""
}
