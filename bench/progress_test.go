package bench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// Written to something that is not a terminal, progress is plain lines, one
// per period and a last one per mode, never a \r.
func TestProgressNotATerminal(t *testing.T) {
	var b bytes.Buffer
	t0 := time.Unix(0, 0)
	p := newProgress(&b, 0, t0)
	if p.live {
		t.Fatal("a bytes.Buffer taken for a terminal")
	}
	for ms := 0; ms <= 12000; ms += 10 { // 12 s of 10 ms samples
		p.update(t0.Add(time.Duration(ms)*time.Millisecond), "tick")
	}
	p.done("end")
	if got, want := b.String(), "tick\ntick\nend\n"; got != want {
		t.Errorf("progress wrote %q; want %q (a line at 5 s, 10 s, then the end)", got, want)
	}
}

func TestProgressDevNullIsNotATerminal(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("/dev/null, a character device, taken for a terminal")
	}
}

// A run's progress into a buffer: plain lines naming each mode.
func TestRunProgressLines(t *testing.T) {
	sc := mustParse(t, `{"name":"p","seed":3,
		"sim":{"ttft":"20ms","per_token":"1ms","capacity":4},
		"sluice":{"max_concurrency":2,"max_wait":"5ms","max_size":4},
		"workload":{"kind":"burst","n":8,"prompt_tokens":[10,50],"output_tokens":[20,40]}}`)
	var b bytes.Buffer
	if _, err := Run(context.Background(), Options{Scenario: sc, Progress: &b, ProgressEvery: 30 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "\r") {
		t.Errorf("progress into a buffer has \\r: %q", out)
	}
	for _, mode := range []string{ModePlain, ModeWindowed} {
		if !strings.Contains(out, mode+" ") || !strings.Contains(out, "sent 8  ok 8  done\n") {
			t.Errorf("progress lacks %s's lines or its end:\n%s", mode, out)
		}
	}
	if n := strings.Count(out, "upstream in-flight"); n < 2 {
		t.Errorf("%d running lines in\n%s\nwant one every 30 ms", n, out)
	}
}
