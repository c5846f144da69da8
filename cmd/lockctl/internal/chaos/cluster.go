package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The three-member clusters of the leader scenarios, started by the
// engine for each round: etcd members, or a ZooKeeper ensemble. They do
// not sync writes to disk (etcd --unsafe-no-fsync, ZooKeeper forceSync=no),
// as the test servers of scripts/services.sh: a killed member keeps what
// it wrote (the page cache outlives the process), and a round measures the
// lock's protocol, not how long the machine's disk makes an fsync wait.

// member is one server process of a cluster.
type member struct {
	dir    string
	client string   // host:port clients use
	argv   []string // the command that starts it
	cmd    *exec.Cmd
	done   chan struct{}
	log    *tail
}

func (m *member) start() error {
	m.cmd = exec.Command(m.argv[0], m.argv[1:]...)
	m.log = &tail{}
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	m.cmd.Dir = m.dir
	if err := m.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", m.argv[0], err)
	}
	m.done = make(chan struct{})
	go func() { m.cmd.Wait(); close(m.done) }()
	return nil
}

func (m *member) kill() {
	if m.cmd != nil && m.cmd.Process != nil {
		m.cmd.Process.Kill()
		<-m.done
	}
}

func (m *member) signal(sig syscall.Signal) { m.cmd.Process.Signal(sig) }

func (m *member) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// cluster is three members and how to ask which one leads.
type cluster struct {
	kind    string // "etcd" or "zookeeper"
	members []*member
	// role returns "leader", "follower" or "" for a member.
	role func(ctx context.Context, m *member) string
}

func (c *cluster) url() string {
	var hosts []string
	for _, m := range c.members {
		hosts = append(hosts, m.client)
	}
	return c.kind + "://" + strings.Join(hosts, ",")
}

func (c *cluster) stop() {
	for _, m := range c.members {
		m.kill()
	}
}

// leader waits until the members agree on one leader, every member that
// runs being leader or follower, and returns its index.
func (c *cluster) leader(ctx context.Context, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		leader, ok := -1, true
		for i, m := range c.members {
			switch {
			case m.exited():
				return -1, fmt.Errorf("%s member %s exited%s", c.kind, m.client, m.log.say())
			case c.role(ctx, m) == "leader" && leader < 0:
				leader = i
			case c.role(ctx, m) != "follower":
				ok = false
			}
		}
		if ok && leader >= 0 {
			return leader, nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return -1, err
		}
	}
	return -1, fmt.Errorf("the %s cluster %s had no leader all members agree on within %v", c.kind, c.url(), within)
}

// ports returns n free loopback ports.
func ports(n int) ([]int, error) {
	var ps []int
	for range n {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// etcdCluster starts three etcd members of bin under dir.
func etcdCluster(bin, dir string) (*cluster, error) {
	ps, err := ports(6) // client, peer per member
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range 3 {
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, loopback(ps[3+i])))
	}
	c := &cluster{kind: "etcd", role: etcdRole}
	for i := range 3 {
		m := &member{dir: filepath.Join(dir, fmt.Sprintf("etcd-%d", ps[i])), client: loopback(ps[i])}
		m.argv = []string{bin, "--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(m.dir, "data"),
			"--listen-client-urls", "http://" + m.client, "--advertise-client-urls", "http://" + m.client,
			"--listen-peer-urls", "http://" + loopback(ps[3+i]), "--initial-advertise-peer-urls", "http://" + loopback(ps[3+i]),
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", filepath.Base(dir) + fmt.Sprint(ps[0]),
			"--initial-cluster-state", "new", "--unsafe-no-fsync", "--logger", "zap", "--log-outputs", "stderr", "--log-level", "error"}
		c.members = append(c.members, m)
	}
	return c, c.startAll()
}

// etcdRole asks the member for its status.
func etcdRole(ctx context.Context, m *member) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.client}, DialTimeout: time.Second, Context: ctx, Logger: zap.NewNop()})
	if err != nil {
		return ""
	}
	defer cli.Close()
	st, err := cli.Status(ctx, m.client)
	switch {
	case err != nil || st.Leader == 0:
		return ""
	case st.Leader == st.Header.MemberId:
		return "leader"
	}
	return "follower"
}

// zkEnsemble starts three ZooKeeper members with the Java classpath cp
// under dir, with the session settings of the test servers (tickTime 500
// ms, sessions from 1 s).
func zkEnsemble(cp, dir string) (*cluster, error) {
	ps, err := ports(9) // client, quorum, election per member
	if err != nil {
		return nil, err
	}
	c := &cluster{kind: "zookeeper", role: zkRole}
	for i := range 3 {
		m := &member{dir: filepath.Join(dir, fmt.Sprintf("zk-%d", ps[i])), client: loopback(ps[i])}
		cfg := fmt.Sprintf("tickTime=500\ninitLimit=10\nsyncLimit=4\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
			"minSessionTimeout=1000\nmaxSessionTimeout=120000\nmaxClientCnxns=0\nadmin.enableServer=false\n"+
			"4lw.commands.whitelist=srvr\nforceSync=no\n", filepath.Join(m.dir, "data"), ps[i])
		for j := range 3 {
			cfg += fmt.Sprintf("server.%d=127.0.0.1:%d:%d\n", j+1, ps[3+j], ps[6+j])
		}
		if err := os.MkdirAll(filepath.Join(m.dir, "data"), 0o755); err != nil {
			return nil, err
		}
		if err := errors.Join(os.WriteFile(filepath.Join(m.dir, "data", "myid"), []byte(fmt.Sprint(i+1)), 0o644),
			os.WriteFile(filepath.Join(m.dir, "zoo.cfg"), []byte(cfg), 0o644)); err != nil {
			return nil, err
		}
		m.argv = []string{"java", "-Xmx128m", "-XX:+UseSerialGC", "-Dzookeeper.log.dir=" + m.dir, "-cp", cp,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(m.dir, "zoo.cfg")}
		c.members = append(c.members, m)
	}
	return c, c.startAll()
}

// zkRole asks the member with the four-letter word srvr.
func zkRole(ctx context.Context, m *member) string {
	var d net.Dialer
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", m.client)
	if err != nil {
		return ""
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	io.WriteString(conn, "srvr")
	b, _ := io.ReadAll(conn)
	for _, role := range []string{"leader", "follower"} {
		if strings.Contains(string(b), "Mode: "+role) {
			return role
		}
	}
	return ""
}

func (c *cluster) startAll() error {
	for _, m := range c.members {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return err
		}
		if err := m.start(); err != nil {
			c.stop()
			return err
		}
	}
	return nil
}

// findEtcd returns the etcd binary: bin if given, else $LOCKER_TEST_ETCD_BIN,
// else etcd on $PATH.
func findEtcd(bin string) (string, error) {
	return findBinary(bin, "LOCKER_TEST_ETCD_BIN", "etcd", "--etcd")
}

// findZK returns the ZooKeeper classpath: cp if given, else
// $LOCKER_TEST_ZK_CLASSPATH, else Debian's, if java and it are there.
func findZK(cp string) (string, error) {
	if _, err := exec.LookPath("java"); err != nil {
		return "", errors.New("no java on $PATH: the ZooKeeper ensemble of the leader scenarios needs one")
	}
	cp = cmp.Or(cp, os.Getenv("LOCKER_TEST_ZK_CLASSPATH"), debianZKClasspath)
	for _, jar := range strings.Split(cp, ":") {
		if _, err := os.Stat(jar); err != nil {
			return "", fmt.Errorf("ZooKeeper classpath: %w (--zk-classpath)", err)
		}
	}
	return cp, nil
}

// debianZKClasspath is where Debian's zookeeper package puts its jars.
const debianZKClasspath = "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-api.jar:" +
	"/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-all.jar:/usr/share/java/metrics-core.jar:/usr/share/java/snappy-java.jar"
