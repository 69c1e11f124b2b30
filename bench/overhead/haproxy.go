package overhead

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// haproxyConfig is a plain HTTP reverse proxy in front of the upstream,
// as one would write it for this job: keep-alive on both sides, idle
// upstream connections reused by any client, no logging (sluice's access
// line is on, as a user gets it; HAProxy's log would go to syslog).
const haproxyConfig = `global
    maxconn %d

defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    option http-keep-alive
    http-reuse always

frontend overhead
    bind %s
    default_backend upstream

backend upstream
    server upstream %s
`

// startHAProxy writes the config and runs haproxy in the foreground in
// front of upstream; it returns its version line.
func startHAProxy(ctx context.Context, exe, upstream, dir string, streams int) (*target, string, error) {
	version := "haproxy"
	if out, err := exec.CommandContext(ctx, exe, "-v").Output(); err == nil {
		line, _, _ := strings.Cut(string(out), "\n")
		version = strings.TrimSpace(strings.Split(line, " - ")[0])
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, haproxyConfig, haproxyMaxConn(streams), addr, upstream), 0o644); err != nil {
		return nil, "", err
	}
	t := &target{name: HAProxy, url: "http://" + addr, cmd: exec.CommandContext(ctx, exe, "-db", "-f", cfg)}
	if t.stderr, err = os.Create(filepath.Join(dir, "haproxy.stderr")); err != nil {
		return nil, "", err
	}
	t.cmd.Stdout, t.cmd.Stderr = io.Discard, t.stderr
	t.cmd.SysProcAttr = orphanless()
	t.cmd.Cancel = func() error { return t.cmd.Process.Signal(syscall.SIGTERM) }
	t.cmd.WaitDelay = 10 * time.Second
	if err := t.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("overhead: start haproxy: %w", err)
	}
	// Ready when it relays a Message.
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for deadline := time.Now().Add(15 * time.Second); ; {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, t.url+"/v1/messages", strings.NewReader(`{}`))
		if resp, err := c.Do(req); err == nil {
			ok := resp.StatusCode == http.StatusOK && resp.Header.Get("Request-Id") != ""
			io.Copy(io.Discard, bufio.NewReader(resp.Body))
			resp.Body.Close()
			if ok {
				return t, version, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop(t)
			return nil, "", fmt.Errorf("overhead: haproxy did not relay within 15 s%s", t.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// haproxyMaxConn is 4,096 connections, or streams (and some) when more
// streams run at once, or fewer where the file limit would not let
// haproxy start: it wants two descriptors a connection.
func haproxyMaxConn(streams int) int {
	want := max(4096, streams+64)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max > uint64(2*want+100) {
		return want
	}
	return max(64, int(lim.Max-100)/2)
}
