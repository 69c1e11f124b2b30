package main

import (
	"bufio"
	"context"
	"io"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sim"
)

func TestDemoServesBurstsUnderTheCap(t *testing.T) {
	cfg := config.Default()
	cfg.Enabled = true
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.MaxConcurrency = 4
	simCfg := sim.Config{TTFT: 20 * time.Millisecond, PerToken: time.Millisecond, Seed: 1}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(time.Minute, cancel).Stop() // a demo that never bursts fails, not hangs
	done := make(chan error)
	go func() {
		done <- demo(ctx, cfg, demoOptions{burst: 20, every: time.Hour, sim: simCfg}, pw)
		pw.Close()
	}()
	burstLine := regexp.MustCompile(`^burst 1: 20 sent, (\d+) ok, .* upstream peak in-flight (\d+) \(cap 4\)$`)
	sc := bufio.NewScanner(pr)
	var sawPointer bool
	for sc.Scan() {
		line := sc.Text()
		if regexp.MustCompile(`export ANTHROPIC_BASE_URL=http://127\.0\.0\.1:\d+`).MatchString(line) {
			sawPointer = true
		}
		m := burstLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if m[1] != "20" {
			t.Errorf("%s of 20 requests ok", m[1])
		}
		if peak, _ := strconv.Atoi(m[2]); peak < 1 || peak > 4 {
			t.Errorf("upstream peak in-flight %d; want 1..4", peak)
		}
		break
	}
	if !sawPointer {
		t.Error("the demo did not print the line to point a client at it")
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Fatalf("demo returned %v", err)
	}
}
