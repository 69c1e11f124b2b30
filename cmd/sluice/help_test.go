package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"
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
