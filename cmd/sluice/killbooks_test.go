package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/sluicebin"
	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/spendstore"
)

// These tests kill a sluice with SIGKILL in the middle of a load and hold
// its books to the simulator's own cost counter. A killed replica loses
// what it counted and had not yet written: the answers of its last write
// interval (spendstore.FlushEvery). The tests measure that loss from the
// clients' side (each client prices the usage of every answer it got)
// and hold it to the answers the killed replica gave in its last
// interval; every other cent is in the books.

// killModel is the model the load asks for; its price makes cents of a
// few hundred answers.
const killModel = "claude-opus-4-1"

// killBody is the load's i-th request body.
func killBody(i int, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":64,"stream":%v,"messages":[{"role":"user","content":"question %d %s"}]}`,
		killModel, stream, i, strings.Repeat("x", i%50))
}

// killMaxCost is the most one request of the load can cost: every byte of
// its body a token of input, and max_tokens of output.
func killMaxCost() float64 {
	return price.Default().Cost(killModel, price.Usage{Input: int64(len(killBody(49, false))), Output: 64}, false).Total()
}

// bookProcess is one `sluice serve` with spend books, as a process of its
// own, so that it can be killed with SIGKILL.
type bookProcess struct {
	name       string
	url, admin string
	pid        int
	cmd        *exec.Cmd
	exited     chan struct{}
	log        *bytes.Buffer
	logMu      *sync.Mutex
}

const killAdminKey = "admin-key-for-the-kill-test"

// startBookProcess runs `sluice serve args...` before upstream with env
// on top of the test's, and waits until it is ready.
func startBookProcess(t *testing.T, name, upstream string, args []string, env ...string) *bookProcess {
	t.Helper()
	addr, admin := freeAddr(t), freeAddr(t)
	cmd := exec.Command(sluicebin.Path(t), append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), "LISTEN_ADDR="+addr, "ADMIN_LISTEN_ADDR="+admin, "ADMIN_KEY="+killAdminKey, "UPSTREAM_URL="+upstream,
		"UI_ENABLED=0", "LOG_LEVEL=warn", "RETRY_MAX_ATTEMPTS=1", "DRAIN_TIMEOUT_S=10", "SHUTDOWN_DELAY_S=0")
	cmd.Env = append(cmd.Env, env...)
	p := &bookProcess{name: name, url: "http://" + addr, admin: "http://" + admin, cmd: cmd, exited: make(chan struct{}), log: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	cmd.Stdout, cmd.Stderr = lockedWriter{p.logMu, p.log}, lockedWriter{p.logMu, p.log}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.pid = cmd.Process.Pid
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			p.logMu.Lock()
			t.Logf("%s's log:\n%s", name, p.log)
			p.logMu.Unlock()
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; {
		if resp, err := http.Get(p.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.exited:
			p.logMu.Lock()
			defer p.logMu.Unlock()
			t.Fatalf("%s exited at start:\n%s", name, p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready in 20 s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill is SIGKILL: no drain, no last write.
func (p *bookProcess) kill() {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// stop is SIGTERM: the requests in flight answered, then the books
// written.
func (p *bookProcess) stop(t *testing.T) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not stop in 20 s after SIGTERM", p.name)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func freeAddr(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(pgtest.FreePort(t)) }

// answer is one answer a client got in full: from which sluice, what its
// usage cost, and when its last byte came.
type answer struct {
	from string
	usd  float64
	at   time.Time
}

// killLoad is clients sending JSON and streamed requests, each to the
// sluice its target says, and pricing every answer they get in full.
type killLoad struct {
	mu      sync.Mutex
	answers []answer
	cut     map[string]int // requests that failed, by sluice: sent, no full answer
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// startKillLoad starts workers clients; target(w) is the sluice (its name
// and URL) client w sends to now.
func startKillLoad(workers int, target func(w int) *bookProcess) *killLoad {
	l := &killLoad{cut: map[string]int{}, done: make(chan struct{})}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.done:
					return
				default:
				}
				p := target(w)
				stream := (w+i)%2 == 0
				usd, err := priceOne(client, p.url, killBody(i, stream), stream)
				l.mu.Lock()
				switch {
				case errors.Is(err, syscall.ECONNREFUSED): // no sluice listened: reached nothing
				case err != nil:
					l.cut[p.name]++
				default:
					l.answers = append(l.answers, answer{from: p.name, usd: usd, at: time.Now()})
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

// stop stops the clients and waits for them; again, it does nothing.
func (l *killLoad) stop() {
	l.once.Do(func() { close(l.done); l.wg.Wait() })
}

// count is how many answers from came, and their cost, at or after since.
func (l *killLoad) count(from string, since time.Time) (n int, usd float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.answers {
		if a.from == from && !a.at.Before(since) {
			n, usd = n+1, usd+a.usd
		}
	}
	return n, usd
}

// waitFor waits until from has given n answers.
func (l *killLoad) waitFor(t *testing.T, from string, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if got, _ := l.count(from, time.Time{}); got >= n {
			return
		}
		if time.Now().After(deadline) {
			got, _ := l.count(from, time.Time{})
			t.Fatalf("%s gave %d answers of %d wanted in 20 s", from, got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// priceOne sends one request and prices the usage of its answer as the
// client sees it: a JSON answer's usage, or a stream's message_start and
// last message_delta. An answer not got in full is an error.
func priceOne(c *http.Client, base, body string, stream bool) (float64, error) {
	return priceAs(c, base, body, stream, "")
}

// statusError is an answer that was not a 200.
type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d: %s", e.status, e.body) }

// priceAs is priceOne as tenant (x-sluice-tenant; "": none).
func priceAs(c *http.Client, base, body string, stream bool, tenant string) (float64, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Api-Key", "sk-kill-test")
	if tenant != "" {
		req.Header.Set("X-Sluice-Tenant", tenant)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, &statusError{resp.StatusCode, string(b)}
	}
	type usage struct {
		Input      int64 `json:"input_tokens"`
		Output     int64 `json:"output_tokens"`
		CacheWrite int64 `json:"cache_creation_input_tokens"`
		CacheRead  int64 `json:"cache_read_input_tokens"`
	}
	var model string
	var u usage
	if !stream {
		var m struct {
			Model string `json:"model"`
			Usage usage  `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			return 0, err
		}
		model, u = m.Model, m.Usage
	} else {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		stopped := false
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Type    string `json:"type"`
				Message struct {
					Model string `json:"model"`
					Usage usage  `json:"usage"`
				} `json:"message"`
				Usage *usage `json:"usage"`
			}
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				return 0, err
			}
			switch ev.Type {
			case "message_start":
				model, u = ev.Message.Model, ev.Message.Usage
			case "message_delta":
				if ev.Usage != nil { // cumulative
					u.Output = ev.Usage.Output
					u.Input, u.CacheWrite, u.CacheRead = max(u.Input, ev.Usage.Input), max(u.CacheWrite, ev.Usage.CacheWrite), max(u.CacheRead, ev.Usage.CacheRead)
				}
			case "message_stop":
				stopped = true
			}
		}
		if !stopped {
			return 0, fmt.Errorf("stream cut: %v", sc.Err())
		}
	}
	return price.Default().Cost(model, price.Usage{Input: u.Input, Output: u.Output, CacheWrite5m: u.CacheWrite, CacheRead: u.CacheRead}, false).Total(), nil
}

// killSim is the simulator the load's sluices stand in front of.
func killSim(t *testing.T) (*sim.Server, string) {
	s := sim.New(sim.Config{TTFT: time.Millisecond, PerToken: 100 * time.Microsecond, OutputTokensMin: 20, OutputTokensMax: 64})
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	return s, up.URL
}

// lostBound is what a sluice killed at kill may have counted and not
// written: its answers of the last write interval, and a second more for
// a write in progress at the kill and a loaded machine's scheduling.
func (l *killLoad) lostBound(from string, kill time.Time) (n int, usd float64) {
	return l.count(from, kill.Add(-spendstore.FlushEvery-time.Second))
}

// checkKilled holds what the books kept of a killed sluice's answers to
// what its clients got: the same, less at most its last interval's (the
// lost part), more at most what was in flight at the kill (answers
// counted, their last bytes not yet sent). It returns the lost USD.
func checkKilled(t *testing.T, l *killLoad, name string, kill time.Time, books float64) float64 {
	t.Helper()
	_, got := l.count(name, time.Time{})
	nLast, lastUSD := l.count(name, kill.Add(-spendstore.FlushEvery))
	nBound, bound := l.lostBound(name, kill)
	l.mu.Lock()
	cut := l.cut[name]
	l.mu.Unlock()
	lost := got - books
	t.Logf("%s, killed: its clients got $%.6f, its books hold $%.6f: $%.6f lost (its answers of its last %v: %d, $%.6f; the bound, of %v more: %d, $%.6f); %d requests cut by the kill",
		name, got, books, lost, spendstore.FlushEvery, nLast, lastUSD, time.Second, nBound, bound, cut)
	if lost > bound+1e-6 {
		t.Errorf("%s lost $%.6f, more than its answers of its last write interval and a second ($%.6f)", name, lost, bound)
	}
	if lost < -float64(cut)*killMaxCost()-1e-6 {
		t.Errorf("%s's books hold $%.6f more than its clients got, more than its %d cut requests could cost", name, -lost, cut)
	}
	return lost
}

// checkSim holds the books to the simulator: it served what the clients
// got and what the killed sluice's cut requests had cost it, at most
// cut × the most a request costs.
func checkSim(t *testing.T, s *sim.Server, l *killLoad, books, lost float64) {
	t.Helper()
	var got float64
	l.mu.Lock()
	for _, a := range l.answers {
		got += a.usd
	}
	cut := 0
	for _, n := range l.cut {
		cut += n
	}
	n := len(l.answers)
	l.mu.Unlock()
	want := s.Stats().CostUSD
	t.Logf("the simulator served $%.6f; the books hold $%.6f (%d answers got in full, $%.6f); the difference $%.6f is $%.6f lost by the kill and $%.6f served to requests the kill cut (%d cut, at most $%.6f each)",
		want, books, n, got, want-books, lost, want-got, cut, killMaxCost())
	if want < 0.05 {
		t.Errorf("the simulator served $%.6f: too little load to compare cents", want)
	}
	if d := want - got; d < -1e-6 || d > float64(cut)*killMaxCost()+1e-6 {
		t.Errorf("the simulator served $%.6f more than the clients got in full; %d requests were cut", d, cut)
	}
}

// Two replicas on one PostgreSQL, in front of the simulator; one is
// killed with SIGKILL mid-load, its clients move to the other, and the
// other is stopped as usual at the end. The survivor's books are its
// clients' answers to the micro-dollar; the killed one's lack at most its
// last write interval's; with those, the books are the simulator's count.
func TestSharedBooksSurviveAKilledReplica(t *testing.T) {
	dsn := pgtest.Start(t)
	s, up := killSim(t)
	env := []string{"SPEND_STORE=" + dsn, "DATA_DIR=" + t.TempDir()}
	a := startBookProcess(t, "a", up, nil, env...)
	b := startBookProcess(t, "b", up, nil, env...)
	var aDead atomic.Bool
	l := startKillLoad(4, func(w int) *bookProcess {
		if w%2 == 0 && !aDead.Load() {
			return a
		}
		return b
	})
	defer l.stop()
	l.waitFor(t, "a", 60)
	time.Sleep(2500 * time.Millisecond) // a few writes before the kill, which lands mid-interval
	kill := time.Now()                  // before: the answers of the interval up to the signal
	a.kill()
	aDead.Store(true)
	nb, _ := l.count("b", time.Time{})
	l.waitFor(t, "b", nb+60)
	l.stop()
	b.stop(t)

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	byReplica := map[string]float64{}
	rows, err := db.Query(`SELECT replica, SUM(usd) FROM spend GROUP BY replica`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r string
		var usd float64
		if err := rows.Scan(&r, &usd); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.Contains(r, fmt.Sprintf(":%d:", a.pid)):
			byReplica["a"] += usd
		case strings.Contains(r, fmt.Sprintf(":%d:", b.pid)):
			byReplica["b"] += usd
		default:
			t.Errorf("a row of replica %q, neither a (pid %d) nor b (pid %d)", r, a.pid, b.pid)
		}
	}
	rows.Close()
	_, bGot := l.count("b", time.Time{})
	t.Logf("b, stopped: its clients got $%.6f, its books hold $%.6f", bGot, byReplica["b"])
	if math.Abs(bGot-byReplica["b"]) > 1e-6 {
		t.Errorf("b's books hold $%.6f; its clients got $%.6f", byReplica["b"], bGot)
	}
	lost := checkKilled(t, l, "a", kill, byReplica["a"])
	checkSim(t, s, l, byReplica["a"]+byReplica["b"], lost)
}

// One sluice with SPEND_STORE=sqlite killed with SIGKILL mid-load and
// started again on its DATA_DIR, its clients going on: the books lack at
// most the killed life's last write interval, the rest is the
// simulator's count.
func TestBooksSurviveAKill(t *testing.T) {
	s, up := killSim(t)
	dir := t.TempDir()
	env := []string{"SPEND_STORE=sqlite", "DATA_DIR=" + dir}
	first := startBookProcess(t, "first", up, nil, env...)
	var cur atomic.Pointer[bookProcess]
	cur.Store(first)
	l := startKillLoad(4, func(int) *bookProcess { return cur.Load() })
	defer l.stop()
	l.waitFor(t, "first", 60)
	time.Sleep(2500 * time.Millisecond)
	kill := time.Now()
	first.kill()
	second := startBookProcess(t, "second", up, nil, env...)
	cur.Store(second)
	l.waitFor(t, "second", 60)
	l.stop()
	second.stop(t)

	usd, _ := booksTotal(t, dir)
	// The second life was stopped as usual: all its answers are in the
	// books; what is left is the first's.
	_, secondGot := l.count("second", time.Time{})
	lost := checkKilled(t, l, "first", kill, usd-secondGot)
	checkSim(t, s, l, usd, lost)
	if _, err := os.Stat(filepath.Join(dir, "spend.db")); err != nil {
		t.Error(err)
	}
}
