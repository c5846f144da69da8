package etcd_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/freeport"
	"github.com/distlock/locker/internal/testenv"
)

// rawClient is a plain etcd client for looking at (and tampering with)
// what the lockers leave on the server.
func rawClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// open opens a Locker and closes it when the test ends.
func open(t testing.TB, rawURL string) locker.Locker {
	t.Helper()
	l, err := locker.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("Open(%q): %v", rawURL, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// uniqueKey returns a lock name no other test run uses.
func uniqueKey(name string) string {
	return fmt.Sprintf("test/%s/%d", name, time.Now().UnixNano())
}

// queue returns the entries in the queue of key in namespace ns, oldest
// first.
func queue(t testing.TB, c *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// freePort returns a port for a private server (freeport's package doc
// says why not one the kernel chooses).
func freePort(t testing.TB) string {
	t.Helper()
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(port)
}

// server is a private etcd for tests that change its settings (auth,
// TLS), started from the same binary as the shared one.
type server struct {
	addr string // host:port of its client URL
	cmd  *exec.Cmd
}

// startServer starts etcd with its client URL on scheme (http or https)
// and the extra flags, and stops it when the test ends. ready must
// succeed once the server answers.
func startServer(t *testing.T, scheme string, ready func(addr string) error, args ...string) *server {
	t.Helper()
	bin := testenv.Get(t, testenv.EtcdBin)
	client, peer := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	dir := t.TempDir()
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{
		"--name", "private", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", scheme + "://" + client, "--advertise-client-urls", scheme + "://" + client,
		"--listen-peer-urls", "http://" + peer, "--initial-advertise-peer-urls", "http://" + peer,
		"--initial-cluster", "private=http://" + peer,
		"--unsafe-no-fsync", // as the servers of scripts/services.sh
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
	}, args...)
	s := &server{addr: client, cmd: exec.Command(bin, args...)}
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		log.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ready(client)
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log.Name())
			t.Fatalf("private etcd on %s did not answer: %v\n%s", client, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// plainReady checks a server on http.
func plainReady(addr string) error { return statusWith(addr, nil) }

// statusWith asks the server at addr for its status, over TLS if tc is
// not nil.
func statusWith(addr string, tc *tls.Config) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: time.Second, TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = c.Status(ctx, addr)
	return err
}

// pki is a test certificate authority with a server certificate for
// 127.0.0.1 and a client certificate, written as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "locker test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return write(cn+".pem", "CERTIFICATE", der), write(cn+"-key.pem", "EC PRIVATE KEY", kder)
	}
	var p pki
	p.ca = write("ca.pem", "CERTIFICATE", caDER)
	p.serverCert, p.serverKey = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return p
}

func certPool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	return pool, nil
}
