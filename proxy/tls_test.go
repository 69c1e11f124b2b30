package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testcert"
)

// testCert is testcert.New, failing t on an error.
func testCert(t *testing.T, serial int64) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	t.Helper()
	certPEM, keyPEM, pool, err := testcert.New(serial)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM, pool
}

// writeCert writes a pair to the files and moves their modification time
// on by step, so that a change is seen whatever the file system's clock
// granularity.
func writeCert(t *testing.T, certFile, keyFile string, certPEM, keyPEM []byte, step int) {
	t.Helper()
	for f, b := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(time.Duration(step) * time.Minute)
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

type tlsFixture struct {
	p        *Proxy
	url      string
	certs    *Certs
	logs     *bytes.Buffer
	certFile string
	keyFile  string
}

func startTLSProxy(t *testing.T, upstream string, certPEM, keyPEM []byte) *tlsFixture {
	t.Helper()
	dir := t.TempDir()
	f := &tlsFixture{logs: &bytes.Buffer{}, certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem")}
	writeCert(t, f.certFile, f.keyFile, certPEM, keyPEM, 0)
	certs, err := LoadCerts(f.certFile, f.keyFile, slog.New(slog.NewTextHandler(lockedWriter{w: f.logs}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	certs.checkEvery = 0
	f.certs = certs
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, upstream, true)
	cfg.TLSCertFile, cfg.TLSKeyFile = f.certFile, f.keyFile
	cfg.PublicURL = &url.URL{Scheme: "https", Host: ln.Addr().String()}
	f.p, err = newProxy(t, cfg, Options{Logger: quietLog, ParkWhenQueued: -1})
	if err != nil {
		t.Fatal(err)
	}
	stop := (&Server{Proxy: f.p, TLS: certs.TLSConfig()}).Start(ln)
	t.Cleanup(func() { stop() })
	f.url = "https://" + ln.Addr().String()
	return f
}

func tlsClient(pool *x509.CertPool) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// A parked request over TLS is answered, and its connection comes back for
// the next request, as over plain TCP.
func TestTLSListenerParksAndHandsBack(t *testing.T) {
	up, holding, release := heldUpstream(t)
	certPEM, keyPEM, pool := testCert(t, 1)
	f := startTLSProxy(t, up, certPEM, keyPEM)
	t.Cleanup(release)
	c := tlsClient(pool)
	t.Cleanup(c.CloseIdleConnections)

	first := make(chan tracedAnswer, 1)
	go func() { first <- tracedPost(c, f.url) }()
	waitFor(t, holding, "the upstream call")
	if n := f.p.parker.Parked(); n != 1 {
		t.Fatalf("while the upstream holds the call: Parked() = %d; want 1 (parked over TLS)", n)
	}
	release()
	a := <-first
	checkAnswer(t, "first answer", a)
	if a.resp.TLS == nil || a.resp.TLS.NegotiatedProtocol == "h2" {
		t.Fatalf("answered over %v; want TLS, HTTP/1.1", a.resp.TLS)
	}
	b := tracedPost(c, f.url)
	checkAnswer(t, "second answer", b)
	if !b.conn.Reused {
		t.Fatal("the second request opened a new connection; the parked one should have come back over TLS")
	}
}

func TestTLSCertificateIsReloadedWhenItsFilesChange(t *testing.T) {
	up := startUpstream(t, apiHandler)
	cert1, key1, pool1 := testCert(t, 1)
	f := startTLSProxy(t, up.URL, cert1, key1)
	serial := func(pool *x509.CertPool) int64 {
		t.Helper()
		c := tlsClient(pool)
		defer c.CloseIdleConnections() // a new handshake each time
		resp, err := c.Get(f.url + "/healthz")
		if err != nil {
			t.Fatalf("GET /healthz over TLS: %v", err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serial(pool1); s != 1 {
		t.Fatalf("served serial %d; want 1", s)
	}

	cert2, key2, pool2 := testCert(t, 2)
	writeCert(t, f.certFile, f.keyFile, cert2, key2, 1)
	if s := serial(pool2); s != 2 {
		t.Fatalf("after the files changed: serial %d; want 2", s)
	}

	// A broken pair keeps the one in force, and says so once.
	writeCert(t, f.certFile, f.keyFile, []byte("not a certificate"), key2, 2)
	if s := serial(pool2); s != 2 {
		t.Fatalf("after a broken certificate was written: serial %d; want 2 still", s)
	}
	serial(pool2)
	logMu.Lock()
	logs := f.logs.String()
	logMu.Unlock()
	if strings.Count(logs, "do not load") != 1 {
		t.Errorf("log:\n%s\nwant one line saying the new files do not load", logs)
	}

	// Reload (SIGHUP) reads them at once, and refuses a broken pair.
	if err := f.certs.Reload(); err == nil {
		t.Error("Reload of a broken pair succeeded")
	}
	cert3, key3, pool3 := testCert(t, 3)
	f.certs.checkEvery = time.Hour // only Reload can see this change now
	writeCert(t, f.certFile, f.keyFile, cert3, key3, 3)
	if err := f.certs.Reload(); err != nil {
		t.Fatal(err)
	}
	if s := serial(pool3); s != 3 {
		t.Fatalf("after Reload: serial %d; want 3", s)
	}
}

func TestLoadCertsRefusesAMismatchedPair(t *testing.T) {
	dir := t.TempDir()
	cert1, _, _ := testCert(t, 1)
	_, key2, _ := testCert(t, 2)
	cf, kf := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	writeCert(t, cf, kf, cert1, key2, 0)
	if _, err := LoadCerts(cf, kf, quietLog); err == nil || !strings.Contains(err.Error(), "TLS_CERT_FILE") {
		t.Fatalf("LoadCerts of a mismatched pair: %v; want an error naming the files", err)
	}
	if _, err := LoadCerts(filepath.Join(dir, "missing.pem"), kf, quietLog); err == nil {
		t.Fatal("LoadCerts of a missing file succeeded")
	}
}

// A client that opens a TCP connection to the TLS listener and never
// sends its ClientHello is cut off by the header timeout (10 s), like one
// that never sends its request line: a handshake holds nothing forever.
func TestSilentTLSHandshakeIsCut(t *testing.T) {
	certPEM, keyPEM, _ := testCert(t, 1)
	f := startTLSProxy(t, startUpstream(t, apiHandler).URL, certPEM, keyPEM)
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	conn.SetReadDeadline(start.Add(20 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the silent connection was still open after %v", time.Since(start).Round(time.Second))
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("closed after %v; want about 10 s", took)
	}
}
