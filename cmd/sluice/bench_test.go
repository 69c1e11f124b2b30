package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sluicebin"
)

// `sluice bench` finds the bench command beside itself first, and in the
// source tree without one beside it, `go run` of the tree's own.
func TestBenchCommandIsFound(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "sluice")
	if got, err := benchCommand(self); err != nil || len(got) != 3 || filepath.Base(got[0]) != "go" || !slices.Equal(got[1:], []string{"run", benchPkg}) {
		t.Errorf("no sluice-bench beside, in the tree: %q, %v; want go run %s", got, err, benchPkg)
	}
	beside := filepath.Join(dir, "sluice-bench")
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := benchCommand(self); err != nil || !slices.Equal(got, []string{beside}) {
		t.Errorf("sluice-bench beside: %q, %v; want %s", got, err, beside)
	}
}

// `go run ./cmd/sluice bench ...`, the docs' command, runs the bench: a
// sluice with no sluice-bench beside it, in the source tree, runs the
// tree's through go run, whose refusal and exit code reach the caller.
func TestBenchRunsFromTheTree(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice and sluice-bench")
	}
	built := sluicebin.Path(t)
	bin := filepath.Join(t.TempDir(), "sluice")
	copyFile(t, built, bin)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "bench", "--scenario", "no-such-scenario", "--quiet")
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 && exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "no-such-scenario") {
		t.Errorf("sluice bench --scenario no-such-scenario in the tree: %v, stderr %q; want the bench's refusal naming it", err, stderr.String())
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
