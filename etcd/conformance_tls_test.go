package etcd_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/testenv"
)

// TestConformanceTLS runs the suite over etcds:// against a private etcd
// whose certificate names localhost and not 127.0.0.1, where the
// harness's proxies listen: the clients verify it against the name in
// the URL, as they would without the proxies. Proxies put in the URL
// instead (ProxyURL) fail that check.
func TestConformanceTLS(t *testing.T) {
	p := testenv.NewPKI(t, "localhost")
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(p.CA)
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("read the test CA %s: %v", p.CA, err)
	}
	byName := func(addr string) string {
		_, port, _ := net.SplitHostPort(addr)
		return "localhost:" + port
	}
	ready := func(addr string) error { return statusWith(byName(addr), &tls.Config{RootCAs: pool}) }
	s := startServer(t, "https", ready, "--cert-file", p.ServerCert, "--key-file", p.ServerKey)
	raw := "etcds://" + byName(s.addr) + "/conformance-tls?cacert=" + p.CA

	pu, proxies, err := conformance.ProxyURL(raw + "&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	l, err := locker.Open(context.Background(), pu)
	for _, p := range proxies {
		p.Close()
	}
	if err == nil {
		l.Close()
		t.Fatalf("Open(%s) through a proxy at 127.0.0.1 succeeded, though the certificate names only localhost", pu)
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Open(%s) = %v, want a certificate error", pu, err)
	}

	conformance.Run(t, conformance.URLHarness(raw))
}
