// Package pgtest runs a real PostgreSQL server for a test: initdb into a
// temporary directory, on a free loopback port, without fsync, stopped
// when the test ends. Outside CI a machine without PostgreSQL skips the
// test, saying how to install it; with CI set it fails the test (.ci/run
// installs it).
package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
)

// Start starts a PostgreSQL server of its own for the test, in a
// temporary directory on a free loopback port, and returns its DSN.
// Outside CI a machine without PostgreSQL skips; in CI it fails.
func Start(t testing.TB) string {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	initdb := ""
	if len(bins) > 0 {
		initdb = bins[len(bins)-1]
	} else if p, err := exec.LookPath("initdb"); err == nil {
		initdb = p
	}
	if initdb == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("PostgreSQL is not installed (apt-get install postgresql); .ci/run installs it")
		}
		t.Skip("PostgreSQL is not installed: apt-get install postgresql")
	}
	binDir := filepath.Dir(initdb)
	dir, err := os.MkdirTemp("", "sluice-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// PostgreSQL refuses to run as root: then it runs as the postgres
	// user the Debian package made.
	run := func(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal("running as root and there is no postgres user to run PostgreSQL as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		run = func(name string, args ...string) *exec.Cmd {
			c := exec.Command(name, args...)
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
			c.Dir = dir
			return c
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := run(initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := FreePort(t)
	srv := run(filepath.Join(binDir, "postgres"), "-D", data, "-k", dir, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-c", "fsync=off", "-c", "max_connections=100")
	logs := &syncWriter{w: &bytes.Buffer{}}
	srv.Stderr = logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// SIGQUIT: immediate shutdown, no checkpoint; the data is thrown away.
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGQUIT); srv.Wait() })
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	db, _ := sql.Open("pgx", dsn)
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return dsn
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL did not start: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// FreePort is a loopback port free now, for a server a test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncWriter is the server's log, written by its process and read when
// it fails to start.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
