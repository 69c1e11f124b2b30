package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sluicebin"
	"github.com/sluicehq/sluice/sim"
)

// fifoServe runs `sluice serve` as a process with inbound keys, its held key
// in upstreamKey, and returns its URL, its log, its pid and its exit.
func fifoServe(t *testing.T, upstream, keys, upstreamKey string) (base string, logs logFile, pid int, exited chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(sluicebin.Path(t), "serve")
	cmd.Env = append(os.Environ(), "LISTEN_ADDR="+addr, "UPSTREAM_URL="+upstream, "BATCH_ENABLED=0", "UI_ENABLED=0",
		"LOG_FORMAT=json", "DRAIN_TIMEOUT_S=1", "INBOUND_KEYS_FILE="+keys, "UPSTREAM_KEY_FILE="+upstreamKey)
	logs = logFile{filepath.Join(t.TempDir(), "stderr")}
	f, err := os.Create(logs.path)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("sluice's log:\n%s", logs.text(t))
		}
	})
	return "http://" + addr, logs, cmd.Process.Pid, exited
}

func waitFor(t *testing.T, what string, within time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
	}
}

// A named pipe at UPSTREAM_KEY_FILE (issue 37, item 6): sluice serve, as a
// real process, is sent real SIGHUPs and a SIGTERM. The pipe is refused at
// once and said so in the log, a key revoked in the keys file meanwhile is
// revoked, and SIGTERM ends the process. Before, the reload waited for the
// pipe's writer for ever: nothing was logged, the revocation never came, and
// SIGTERM never ended the process. At start, the pipe is refused the same.
func TestFIFOAtUpstreamKeyFileWedgesNeitherReloadNorShutdown(t *testing.T) {
	s := sim.New(sim.Config{Seed: 1})
	up := httptest.NewServer(s)
	defer func() { up.Close(); s.Close() }()
	dir := t.TempDir()
	keys, held := filepath.Join(dir, "keys.json"), filepath.Join(dir, "upstream-key")
	os.WriteFile(keys, []byte(keysFile(map[string]string{"alice": aliceKey, "bob": bobKey})), 0o600)
	os.WriteFile(held, []byte(e2eHeldKey+"\n"), 0o600)
	base, logs, pid, exited := fifoServe(t, up.URL, keys, held)
	waitFor(t, "ready", 15*time.Second, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	call := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/v1/messages", strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := call(aliceKey); got != 200 {
		t.Fatalf("alice before: %d", got)
	}
	os.Remove(held)
	if err := syscall.Mkfifo(held, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	syscall.Kill(pid, syscall.SIGHUP)
	waitFor(t, "a log line for the pipe at UPSTREAM_KEY_FILE", 5*time.Second, func() bool {
		return strings.Contains(logs.text(t), "not a regular file (a named pipe)")
	})
	os.WriteFile(keys, []byte(keysFile(map[string]string{"bob": bobKey})), 0o600)
	syscall.Kill(pid, syscall.SIGHUP)
	waitFor(t, "alice revoked", 5*time.Second, func() bool { return call(aliceKey) == 401 })
	if got := call(bobKey); got != 200 {
		t.Errorf("bob, kept, with the held key kept: %d", got)
	}
	syscall.Kill(pid, syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("sluice serve ended with %v; want exit 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("SIGTERM: the process is still running after 15 s")
	}

	// At start: refused, at once, saying what is wrong.
	_, logs, _, exited = fifoServe(t, up.URL, keys, held)
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(logs.text(t), "named pipe") {
			t.Errorf("start with a pipe at UPSTREAM_KEY_FILE: %v, log %q; want a failure naming the pipe", err, logs.text(t))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("start with a pipe at UPSTREAM_KEY_FILE: still running (or waiting) after 15 s")
	}
}
