package sluicebin

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Replica is one `sluice serve` process with the gate shared through
// Redis (GATE_BACKEND=redis), killed when its test ends.
type Replica struct {
	Name string
	URL  string
	cmd  *exec.Cmd
	exit chan struct{}
}

// StartReplica runs `sluice serve` with the shared gate on redisURL, cap
// slots, before upstream, with extra settings (NAME=value) on top, or
// flags (--name=value: --config=FILE, say), and waits until it is ready.
// Its log is shown if the test fails.
func StartReplica(t *testing.T, name, redisURL, upstream string, cap int, extra ...string) *Replica {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	args := []string{"serve"}
	var settings []string
	for _, e := range extra {
		if strings.HasPrefix(e, "--") {
			args = append(args, e)
		} else {
			settings = append(settings, e)
		}
	}
	cmd := exec.Command(Path(t), args...)
	cmd.Env = append(os.Environ(), "BATCH_ENABLED=1", "LISTEN_ADDR="+addr, "UPSTREAM_URL="+upstream,
		"GATE_BACKEND=redis", "REDIS_URL="+redisURL, "BATCH_MAX_CONCURRENCY="+strconv.Itoa(cap),
		"BATCH_MAX_WAIT_MS=20", "BATCH_TIMEOUT_S=60", "GATE_LEASE_TTL_S=2", "UI_ENABLED=0", "LOG_LEVEL=warn",
		"ADMIT_BY_CLIENT_TIMEOUT=0", "CACHE_AWARE=0", "RETRY_MAX_ATTEMPTS=1", "DRAIN_TIMEOUT_S=1")
	cmd.Env = append(cmd.Env, settings...)
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	r := &Replica{Name: name, URL: "http://" + addr, cmd: cmd, exit: make(chan struct{})}
	go func() { cmd.Wait(); close(r.exit) }()
	t.Cleanup(func() {
		r.Kill()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil && len(b) > 0 {
				t.Logf("%s's log:\n%s", name, b)
			}
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(r.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready: %v", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the process (SIGKILL) and waits for it to exit.
func (r *Replica) Kill() {
	select {
	case <-r.exit:
	default:
		r.cmd.Process.Kill()
		<-r.exit
	}
}

// Metric reads one metric of r's /metrics, named with its labels as the
// page shows it.
func (r *Replica) Metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(r.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	t.Fatalf("%s serves no %s", r.Name, name)
	return 0
}

// Client is an HTTP client for many requests at once to replicas.
var Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 400}, Timeout: 60 * time.Second}
