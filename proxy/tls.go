package proxy

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/regfile"
)

// Certs is the certificate and key that LISTEN_ADDR serves TLS with
// (TLS_CERT_FILE, TLS_KEY_FILE), read again when either file changes (its
// modification time, looked at no more than once a second, at a
// handshake) or on Reload (SIGHUP), so that a renewed certificate is
// served without a restart. A pair that does not load leaves the previous
// one in force, and says why in the log.
type Certs struct {
	certFile, keyFile string
	log               *slog.Logger
	// checkEvery is how often a handshake may look at the files; tests set
	// it to zero.
	checkEvery time.Duration

	cur     atomic.Pointer[loadedCert]
	checked atomic.Int64 // when the files were last looked at, Unix nanoseconds
	mu      sync.Mutex   // one reading of the files at a time
}

type loadedCert struct {
	cert            *tls.Certificate
	certMod, keyMod time.Time
}

// LoadCerts reads the pair; it fails if they do not load or do not match.
// log hears of reloads.
func LoadCerts(certFile, keyFile string, log *slog.Logger) (*Certs, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &Certs{certFile: certFile, keyFile: keyFile, log: log, checkEvery: time.Second}
	lc, err := c.read()
	if err != nil {
		return nil, err
	}
	c.cur.Store(lc)
	c.checked.Store(time.Now().UnixNano())
	return c, nil
}

func (c *Certs) read() (*loadedCert, error) {
	cm, km, err := c.mtimes()
	if err != nil {
		return nil, err
	}
	// Each read only from a regular file: a named pipe would hold the
	// handshake that looks for a change, or the reload.
	certPEM, err := regfile.ReadFile(c.certFile, maxPEM)
	if err != nil {
		return nil, fmt.Errorf("TLS_CERT_FILE: %w", err)
	}
	keyPEM, err := regfile.ReadFile(c.keyFile, maxPEM)
	if err != nil {
		return nil, fmt.Errorf("TLS_KEY_FILE: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("TLS_CERT_FILE %s and TLS_KEY_FILE %s: %w", c.certFile, c.keyFile, err)
	}
	return &loadedCert{cert: &cert, certMod: cm, keyMod: km}, nil
}

// maxPEM bounds what is read of a certificate or key file: a chain of
// certificates is some kilobytes.
const maxPEM = 1 << 20

func (c *Certs) mtimes() (cert, key time.Time, err error) {
	ci, err := os.Stat(c.certFile)
	if err != nil {
		return cert, key, fmt.Errorf("TLS_CERT_FILE: %w", err)
	}
	ki, err := os.Stat(c.keyFile)
	if err != nil {
		return cert, key, fmt.Errorf("TLS_KEY_FILE: %w", err)
	}
	return ci.ModTime(), ki.ModTime(), nil
}

// Reload reads the pair again; if it does not load, the previous one stays
// in force and the error says why.
func (c *Certs) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	lc, err := c.read()
	if err != nil {
		return err
	}
	c.cur.Store(lc)
	return nil
}

// GetCertificate is tls.Config.GetCertificate: the pair in force, read
// again first if a file has changed since.
func (c *Certs) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := time.Now().UnixNano()
	if last := c.checked.Load(); now-last >= int64(c.checkEvery) && c.checked.CompareAndSwap(last, now) {
		c.refresh()
	}
	return c.cur.Load().cert, nil
}

// refresh reloads the pair if either file's modification time moved.
func (c *Certs) refresh() {
	cm, km, err := c.mtimes()
	cur := c.cur.Load()
	if err == nil && cm.Equal(cur.certMod) && km.Equal(cur.keyMod) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	lc, err := c.read()
	if err != nil {
		// Once per change: the next look compares against these times.
		if cm, km, merr := c.mtimes(); merr == nil {
			c.cur.Store(&loadedCert{cert: cur.cert, certMod: cm, keyMod: km})
		}
		c.log.Error("the TLS certificate files changed but do not load; the previous certificate stays in force", "err", err)
		return
	}
	c.cur.Store(lc)
	c.log.Info("TLS certificate reloaded", "cert_file", c.certFile)
}

// TLSConfig is the listener's TLS configuration: this pair, TLS 1.2 or
// newer, HTTP/1.1 (parking takes HTTP/1.1 connections over, and Go's
// server speaks HTTP/2 only on the connections it wraps itself).
func (c *Certs) TLSConfig() *tls.Config {
	return &tls.Config{GetCertificate: c.GetCertificate, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
}
