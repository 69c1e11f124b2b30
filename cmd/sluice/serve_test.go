package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGracefulShutdownAnswersEveryAcceptedRequest(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-release
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"type":"message"}`)
	}))
	defer up.Close()

	cfg := config.Default()
	cfg.Enabled = true
	cfg.UpstreamURL, _ = url.Parse(up.URL)
	cfg.MaxWait = time.Hour // only the shutdown flush can release the last window
	cfg.MaxSize = 16
	parts, _, _, err := buildParts(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(cfg, proxy.Options{Logger: slog.New(slog.DiscardHandler), Parts: *parts})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error)
	// accepted counts requests whose handler has started: those are the ones
	// the server has accepted, and each must get its answer.
	var accepted atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accepted.Add(1)
		p.ServeHTTP(w, r)
	})
	go func() { served <- serve(ctx, ln, h, p, 0, 30*time.Second, slog.New(slog.DiscardHandler)) }()

	const n = 40 // two full waves and one partial one held open by MaxWait
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.Transport.(*http.Transport).CloseIdleConnections()
	for range n {
		wg.Go(func() {
			resp, err := client.Post("http://"+ln.Addr().String()+"/v1/messages", "application/json",
				strings.NewReader(`{"model":"m","max_tokens":1,"messages":[]}`))
			if err != nil {
				t.Errorf("a request accepted before shutdown failed: %v", err)
				statuses <- -1
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	// Wait until the server has accepted all n. (Queued and in-flight counts
	// read one after the other can count a request moving between them
	// twice, so they would not do.) Some are in windows, some wait for a
	// slot, 8 are in flight, and the last may still be reading its body: a
	// window it joins after the signal is released at once.
	for deadline := time.Now().Add(10 * time.Second); accepted.Load() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d requests reached sluice", accepted.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	stop() // the signal
	// New connections are refused once shutdown has begun...
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections after shutdown began")
		}
		time.Sleep(time.Millisecond)
	}
	close(release) // ...and the accepted ones are all answered.
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Fatalf("a request accepted before shutdown got %d", s)
		}
	}
	if err := <-served; err != nil {
		t.Fatalf("serve returned %v; want nil (exit 0)", err)
	}
}

func TestServeRejectsBadSettingsWithOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--batch-max-size", "0"}, `invalid BATCH_MAX_SIZE="0" (from flag --batch-max-size): must be at least 1`},
		{[]string{"--batch-enabled", "maybe"}, `invalid BATCH_ENABLED="maybe"`},
		{[]string{"--upstream", "api.anthropic.com"}, `invalid UPSTREAM_URL="api.anthropic.com"`},
		{[]string{"--config", writeFile(t, "sluice.toml", "BATCH_MAX_CONCURENCY = 16\n")},
			`unknown setting "BATCH_MAX_CONCURENCY"; did you mean BATCH_MAX_CONCURRENCY?`},
		{[]string{"--config", writeFile(t, "sluice.toml", "BATCH_MAX_SIZE = 2.5\n")},
			`invalid BATCH_MAX_SIZE="2.5" (from config file `},
	} {
		err := runServe(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("runServe(%q) = %v; want one line containing %q", tc.args, err, tc.want)
		}
	}
}

// writeFile writes body to a file called name in a temporary directory and
// returns its path.
func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestMisspeltSettingGetsAWarningNamingTheSetting(t *testing.T) {
	var b strings.Builder
	warnMisspelt(slog.New(slog.NewTextHandler(&b, nil)), []string{"BATCH_MAX_CONCURENCY=4711", "UPSTREAM_ULR=http://user:sk-ant-secret@gw", "HOME=/root"})
	out := b.String()
	if strings.Count(out, "\n") != 2 || !strings.Contains(out, "level=WARN") ||
		!strings.Contains(out, "variable=BATCH_MAX_CONCURENCY setting=BATCH_MAX_CONCURRENCY") ||
		!strings.Contains(out, "variable=UPSTREAM_ULR setting=UPSTREAM_URL") {
		t.Errorf("warnings:\n%s\nwant one for each misspelt setting, naming it and the likely setting", out)
	}
	if strings.Contains(out, "secret") || strings.Contains(out, "4711") {
		t.Errorf("a warning shows a value:\n%s", out)
	}
}

// The start-up line names the upstream without the password of its URL.
func TestStartupLineRedactsTheUpstreamPassword(t *testing.T) {
	var b strings.Builder
	cfg := config.Default()
	cfg.UpstreamURL, _ = url.Parse("https://gateway-user:sk-ant-hunter2@gw.internal:8443/anthropic")
	cfg.PublicURL, _ = url.Parse("http://127.0.0.1:8080")
	logListening(slog.New(slog.NewJSONHandler(&b, nil)), &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, cfg)
	out := b.String()
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "gw.internal:8443") {
		t.Fatalf("start-up line %s: want the upstream's host and no password", out)
	}
}
