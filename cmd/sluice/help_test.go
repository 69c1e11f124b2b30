package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sluicebin"
)

// Every --help that prints the settings fits a terminal of 80 columns.
func TestHelpFitsIn80Columns(t *testing.T) {
	for name, write := range map[string]func(io.Writer){
		"sluice":       usage,
		"sluice serve": serveUsage,
		"sluice demo":  demoUsage,
	} {
		var b strings.Builder
		write(&b)
		if !strings.Contains(b.String(), "Usage: sluice") {
			t.Errorf("%s --help has no usage line:\n%s", name, b.String())
		}
		for i, line := range strings.Split(b.String(), "\n") {
			if len(line) > 80 {
				t.Errorf("%s --help, line %d, is %d columns: %q", name, i+1, len(line), line)
			}
		}
	}
}

// --help is answered, not an error, and prints the table.
func TestServeHelpPrintsTheSettings(t *testing.T) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	stderr := os.Stderr
	os.Stderr = devnull // where the flag package prints the usage
	err = runServe([]string{"--help"})
	os.Stderr = stderr
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("runServe(--help) = %v; want flag.ErrHelp (exit 0, usage printed)", err)
	}
	var b strings.Builder
	serveUsage(&b)
	if !strings.Contains(b.String(), "BATCH_MAX_CONCURRENCY  --batch-max-concurrency  (default 8)") {
		t.Errorf("serve --help lacks the settings:\n%s", b.String())
	}
}

// A command refuses an argument it does not take, with its usage on stderr
// and exit code 2, rather than ignoring it: the image's entrypoint is
// `sluice serve`, so `podman run IMAGE version` runs `sluice serve version`,
// which must not start a server.
func TestCommandsRefuseStrayArguments(t *testing.T) {
	bin := sluicebin.Path(t)
	for _, args := range [][]string{
		{"serve", "version"},
		{"serve", "bogus-arg"},
		{"serve", "--listen", "127.0.0.1:0", "bogus-arg"},
		{"demo", "bogus-arg"},
		{"sim", "bogus-arg"},
		{"bench", "bogus-arg"},
		{"version", "bogus-arg"},
		{"inbound-key", "a", "b"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "UPSTREAM_KEY=sk-ant-test", "LISTEN_ADDR=127.0.0.1:0")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("sluice %s: %v (stdout %q, stderr %q); want exit code 2", strings.Join(args, " "), err, stdout.String(), stderr.String())
			continue
		}
		if !strings.Contains(stderr.String(), args[len(args)-1]) || !strings.Contains(strings.ToLower(stderr.String()), "usage") {
			t.Errorf("sluice %s: stderr %q; want the stray argument named and the usage", strings.Join(args, " "), stderr.String())
		}
	}
}
