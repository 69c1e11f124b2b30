package bulk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/sluicebin"
	"github.com/sluicehq/sluice/sim"
)

// These tests run the real command, `sluice serve`, built with go build,
// and kill it with SIGKILL at each stage of a request's way.

// sluiceBinary is the sluice command, built once per test binary.
func sluiceBinary(t *testing.T) string { return sluicebin.Path(t) }

// replica is one running `sluice serve`.
type replica struct {
	t    *testing.T
	cmd  *exec.Cmd
	url  string
	logs *syncWriter
}

func startReplica(t *testing.T, env map[string]string) *replica {
	t.Helper()
	port := pgtest.FreePort(t)
	cmd := exec.Command(sluiceBinary(t), "serve")
	cmd.Env = append(os.Environ(), "LISTEN_ADDR=127.0.0.1:"+strconv.Itoa(port), "BULK_ENABLED=1", "UI_ENABLED=0", "LOG_LEVEL=warn")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logs := &syncWriter{w: &bytes.Buffer{}}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{t: t, cmd: cmd, url: "http://127.0.0.1:" + strconv.Itoa(port), logs: logs}
	t.Cleanup(r.kill)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(r.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			return r
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			t.Fatalf("sluice serve did not start: %v\n%s", err, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.(*bytes.Buffer).String()
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// kill sends SIGKILL: no drain, no flush, nothing but what is on disk.
func (r *replica) kill() {
	if r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

func (r *replica) call(method, path, body string) (int, map[string]any) {
	r.t.Helper()
	req, _ := http.NewRequest(method, r.url+path, strings.NewReader(body))
	req.Header.Set("x-api-key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v
}

func (r *replica) submit(n int, tag string) []string {
	r.t.Helper()
	var ids []string
	for i := range n {
		code, v := r.call("POST", "/v1/bulk/messages", msgBody(fmt.Sprintf("%s %d", tag, i)))
		if code != 202 {
			r.t.Fatalf("submit: %d %v", code, v)
		}
		ids = append(ids, v["id"].(string))
	}
	return ids
}

// awaitAll waits until every id has ended with a succeeded result.
func (r *replica) awaitAll(ids []string) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, id := range ids {
		for {
			code, v := r.call("GET", "/v1/bulk/messages/"+id+"?wait=5s", "")
			if code == 200 && v["status"] == StatusEnded {
				if resultType(v) != "succeeded" {
					r.t.Errorf("%s ended %v; want succeeded", id, v["result"])
				}
				break
			}
			if time.Now().After(deadline) {
				r.t.Fatalf("%s did not end: %d %v\nlogs:\n%s", id, code, v, r.logs)
			}
		}
	}
}

// waitUpstream waits until the simulator has seen every id.
func waitUpstream(t *testing.T, s *sim.Server, ids []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := s.CustomIDCounts()
		all := true
		for _, id := range ids {
			all = all && c[id] > 0
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream did not get the batch: counts %v", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wantOnce(t *testing.T, s *sim.Server, ids []string) {
	t.Helper()
	c := s.CustomIDCounts()
	for _, id := range ids {
		if c[id] != 1 {
			t.Errorf("%s reached the upstream %d times; want exactly 1", id, c[id])
		}
	}
}

func startSim(t *testing.T) (*sim.Server, string) {
	s := sim.New(sim.Config{BatchDuration: 300 * time.Millisecond})
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	return s, srv.URL
}

func TestCrashSafetySQLite(t *testing.T) {
	crashSafety(t, map[string]string{"BULK_STORE": "sqlite", "DATA_DIR": t.TempDir()})
}

func TestCrashSafetyPostgreSQL(t *testing.T) {
	crashSafety(t, map[string]string{"BULK_STORE": pgtest.Start(t), "DATA_DIR": t.TempDir()})
}

func crashSafety(t *testing.T, env map[string]string) {
	s, upURL := startSim(t)
	with := func(extra ...string) map[string]string {
		e := map[string]string{"UPSTREAM_URL": upURL, "BULK_POLL_MS": "200", "BULK_SECRET": "crash-test"}
		for k, v := range env {
			e[k] = v
		}
		for i := 0; i+1 < len(extra); i += 2 {
			e[extra[i]] = extra[i+1]
		}
		return e
	}
	var all []string

	// 1. After the 202, before submission: the window waits an hour.
	r := startReplica(t, with("BULK_MAX_WAIT_S", "3600"))
	stage1 := r.submit(5, "before submission")
	r.kill()
	if c := s.CustomIDCounts(); len(c) != 0 {
		t.Fatalf("submitted before the window closed: %v", c)
	}
	r = startReplica(t, with("BULK_MAX_WAIT_S", "1", "BULK_MAX_BATCH_REQUESTS", "5"))
	r.awaitAll(stage1)
	all = append(all, stage1...)

	// 2. During the create: the batch is made, its answer never comes,
	// and sluice dies waiting for it.
	s.SetBatchFaults(sim.BatchFaults{HangCreateAnswers: 1})
	stage2 := r.submit(5, "during the create")
	waitUpstream(t, s, stage2)
	r.kill()
	s.SetBatchFaults(sim.BatchFaults{})
	r = startReplica(t, with("BULK_MAX_WAIT_S", "1", "BULK_MAX_BATCH_REQUESTS", "5"))
	r.awaitAll(stage2)
	all = append(all, stage2...)

	// 3. After some results were stored: a second batch is in progress
	// upstream when sluice dies.
	s.SetBatchFaults(sim.BatchFaults{Paused: true})
	stage3 := r.submit(5, "after some results")
	waitUpstream(t, s, stage3)
	r.kill()
	s.SetBatchFaults(sim.BatchFaults{})
	r = startReplica(t, with("BULK_MAX_WAIT_S", "1", "BULK_MAX_BATCH_REQUESTS", "5"))
	r.awaitAll(stage3)
	all = append(all, stage3...)

	// Every accepted request has exactly one result, still readable, and
	// reached the upstream exactly once.
	r.awaitAll(all)
	wantOnce(t, s, all)
	if strings.Contains(r.logs.String(), testKey) {
		t.Error("a log line holds the API key")
	}
}

// TestReplicasSubmitOnce: queued requests left by a dead replica are
// picked up by two replicas at once, each sweeping all of them into its
// windows; the row locks let each request go into exactly one batch.
func TestReplicasSubmitOnce(t *testing.T) {
	dsn := pgtest.Start(t)
	s, upURL := startSim(t)
	env := func(wait string) map[string]string {
		return map[string]string{"UPSTREAM_URL": upURL, "BULK_POLL_MS": "200", "BULK_SECRET": "replicas", "BULK_STORE": dsn,
			"DATA_DIR": t.TempDir(), "BULK_MAX_WAIT_S": wait, "BULK_MAX_BATCH_REQUESTS": "7"}
	}
	a := startReplica(t, env("3600"))
	left := a.submit(40, "left behind")
	a.kill()
	var b, c *replica
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); b = startReplica(t, env("1")) }()
	go func() { defer wg.Done(); c = startReplica(t, env("1")) }()
	wg.Wait()
	ids := append(b.submit(10, "to b"), c.submit(10, "to c")...)
	ids = append(ids, left...)
	b.awaitAll(ids)
	c.awaitAll(ids[:5])
	wantOnce(t, s, ids)
}
