package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionTextShowsTheBuildInfo(t *testing.T) {
	info := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/sluicehq/sluice", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "5e58ccb0123456789abcdef0123456789abcdef0"},
			{Key: "vcs.time", Value: "2026-11-30T12:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	got := versionText(info, true)
	for _, want := range []string{"sluice v1.2.3\n", "revision  5e58ccb0123456789abcdef0123456789abcdef0 (with uncommitted changes)\n",
		"time      2026-11-30T12:00:00Z\n", "go        go1.26.8 " + runtime.GOOS + "/" + runtime.GOARCH + "\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("version text lacks %q:\n%s", want, got)
		}
	}
}

func TestVersionTextSaysWhatTheBuildDidNotRecord(t *testing.T) {
	// As `go install ...@v1.2.3` builds: a module version, no VCS stamp.
	got := versionText(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}, true)
	if !strings.Contains(got, "revision  unknown\n") || !strings.Contains(got, "time      unknown\n") || strings.Contains(got, "uncommitted") {
		t.Errorf("without VCS settings:\n%s", got)
	}
	if got := versionText(nil, false); !strings.HasPrefix(got, "sluice unknown\n") || !strings.Contains(got, runtime.Version()) {
		t.Errorf("without build info:\n%s", got)
	}
}

// Both spellings print the running binary's own build info.
func TestVersionCommandAndFlagPrintTheBuildInfo(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	want := versionText(info, ok)
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var out strings.Builder
		if err := run(args, &out); err != nil {
			t.Fatalf("sluice %s: %v", args[0], err)
		}
		if out.String() != want || !strings.Contains(out.String(), info.GoVersion) {
			t.Errorf("sluice %s printed:\n%s\nwant:\n%s", args[0], out.String(), want)
		}
	}
}
