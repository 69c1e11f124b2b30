// Package redistest runs a real redis-server for a test: on a free
// loopback port, in the test's temporary directory, without persistence,
// stopped when the test ends. Outside CI a missing redis-server skips the
// test, saying how to install it; with CI set it fails the test.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process, which can be stopped and started
// again on the same port (with its data gone, as after a crash).
type Server struct {
	Addr string // 127.0.0.1:port
	URL  string // redis://127.0.0.1:port/0

	t    testing.TB
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	exit chan struct{}
}

// Start starts a redis-server and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is not installed (apt-get install redis-server): %v", err)
		}
		t.Skip("redis-server is not installed; apt-get install redis-server to run this test")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &Server{t: t, bin: bin, dir: t.TempDir(), port: port}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.URL = "redis://" + s.Addr + "/0"
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Restart starts the server again after Stop (or for the first time), and
// waits until it answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	if f, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		s.cmd.Stdout, s.cmd.Stderr = f, f // the os/exec copy ends with the process; f is closed with it
		defer f.Close()
	}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.exit = make(chan struct{})
	go func(c *exec.Cmd, exit chan struct{}) { c.Wait(); close(exit) }(s.cmd, s.exit)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := s.Do("PING"); err == nil {
			return
		} else if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer PING: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exit
	s.cmd = nil
}

// Do sends one command in the inline protocol and reads one reply line,
// failing on an error reply.
func (s *Server) Do(args ...string) error {
	_, err := s.Reply(args...)
	return err
}

// Reply sends one command and returns its first reply line (an integer's
// or a simple string's text, or a bulk string's length line).
func (s *Server) Reply(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\r\n", strings.Join(args, " ")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if strings.HasPrefix(line, "-") {
		return "", fmt.Errorf("redis: %s", line[1:])
	}
	return line, nil
}

// Pause freezes the server (SIGSTOP): connections stay open and nothing
// answers, as with a Redis that hangs or a network that drops packets.
func (s *Server) Pause() { s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume thaws a paused server (SIGCONT).
func (s *Server) Resume() { s.cmd.Process.Signal(syscall.SIGCONT) }
