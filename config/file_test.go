package config

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// withFile writes a config file of body and returns the flag set that
// names it in --config, with args after it.
func withFile(t *testing.T, body string, args ...string) *flag.FlagSet {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.toml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse(append([]string{"--config", path}, args...)); err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestFlagBeatsEnvBeatsFileBeatsDefault(t *testing.T) {
	fs := withFile(t, `
BATCH_MAX_SIZE = 2
BATCH_MAX_WAIT_MS = 3
BATCH_MAX_CONCURRENCY = 4
`, "--batch-max-size", "1")
	c, err := Load(fs, env(map[string]string{"BATCH_MAX_SIZE": "9", "BATCH_MAX_WAIT_MS": "5"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxSize != 1 || c.MaxWait != 5*time.Millisecond || c.MaxConcurrency != 4 || c.MaxQueue != 1024 {
		t.Fatalf("size %d, wait %v, concurrency %d, queue %d; want 1 (flag), 5ms (env), 4 (file), 1024 (default)",
			c.MaxSize, c.MaxWait, c.MaxConcurrency, c.MaxQueue)
	}
}

// Every setting can be given in the file, under its environment name.
func TestFileTakesEverySetting(t *testing.T) {
	var b strings.Builder
	for _, s := range Settings {
		fmt.Fprintf(&b, "%s = %q\n", s.Env, s.Default)
	}
	c, err := Load(withFile(t, b.String()), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := Default(); !reflect.DeepEqual(c, want) {
		t.Fatalf("from a file of the defaults: %+v; want %+v", c, want)
	}
}

// TOML's own types are taken as the environment's text would be.
func TestFileValuesOfTOMLTypes(t *testing.T) {
	c, err := Load(withFile(t, `
BATCH_ENABLED = true
METRICS_ENABLED = "off"
BATCH_MAX_SIZE = "7"
UPSTREAM_URL = "http://sim.internal:9090"
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Enabled || c.MetricsEnabled || c.MaxSize != 7 || c.UpstreamURL.String() != "http://sim.internal:9090" {
		t.Fatalf("got %+v", c)
	}
}

func TestFileErrorsAreOneLineNamingTheSetting(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`BATCH_MAX_SIZE = 1.5`, `invalid BATCH_MAX_SIZE="1.5" (from config file `},
		{`BATCH_MAX_SIZE = 1.5`, `sluice.toml): not a whole number; accepted: a whole number >= 1`},
		{`BATCH_MAX_SIZE = "ten"`, `not a whole number; accepted: a whole number >= 1`},
		{`BATCH_ENABLED = "maybe"`, `invalid BATCH_ENABLED="maybe"`},
		{`BATCH_MAX_SIZE = [1, 2]`, `invalid BATCH_MAX_SIZE="[1 2]" (from config file `},
		{`BATCH_MAX_SIZE = [1, 2]`, `an array, not a single value; accepted: a whole number >= 1`},
		{`BATCH_TIMEOUT_S = 2026-12-01`, `a date or time, not a setting's value`},
		{"[BATCH_MAX_SIZE]\nx = 1", `a table, not a single value`},
		{`BATCH_MAX_CONCURENCY = 16`, `sluice.toml: unknown setting "BATCH_MAX_CONCURENCY"; did you mean BATCH_MAX_CONCURRENCY?`},
		{`batch_max_size = 4`, `unknown setting "batch_max_size"; did you mean BATCH_MAX_SIZE? (keys are the environment names, in capitals)`},
		{"[batch]\nmax_size = 4", `unknown setting "batch"`},
		{"BATCH_MAX_SIZE = 4\nBATCH_MAX_SIZE = 5", `sluice.toml: toml: line 2`},
		{"BATCH_MAX_SIZE = \n", `sluice.toml: toml: line 1`},
	} {
		_, err := Load(withFile(t, tc.body), env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("file %q: err = %v; want one line containing %q", tc.body, err, tc.want)
		}
	}
}

// The environment overrides a bad value in the file: only the value that
// is used is checked.
func TestEnvironmentOverridesTheFile(t *testing.T) {
	c, err := Load(withFile(t, `BATCH_MAX_SIZE = [1]`), env(map[string]string{"BATCH_MAX_SIZE": "3"}))
	if err != nil || c.MaxSize != 3 {
		t.Fatalf("got %d, %v; want 3 from the environment", c.MaxSize, err)
	}
}

func TestMissingFileStopsStartUp(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	RegisterFlags(fs)
	fs.Parse([]string{"--config", filepath.Join(t.TempDir(), "nope.toml")})
	if _, err := Load(fs, env(nil)); err == nil || !strings.Contains(err.Error(), "config file") || !strings.Contains(err.Error(), "nope.toml") {
		t.Fatalf("err = %v; want it to name the config file", err)
	}
}

// A caller's own default (the demo's BATCH_ENABLED=1) still loses to the
// file.
func TestCallersDefaultLosesToTheFile(t *testing.T) {
	demo := map[string]string{"BATCH_ENABLED": "1"}
	if c, err := LoadDefaults(nil, env(nil), demo); err != nil || !c.Enabled {
		t.Fatalf("no file: enabled %v, %v; want the caller's default, on", c.Enabled, err)
	}
	if c, err := LoadDefaults(withFile(t, "BATCH_ENABLED = false"), env(nil), demo); err != nil || c.Enabled {
		t.Fatalf("file says false: enabled %v, %v; want off", c.Enabled, err)
	}
}
