package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// unit reads a systemd unit's [Service] keys; a key given twice keeps its
// last value, as systemd does for most.
func unit(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	section := ""
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		if l[0] == '[' {
			section = strings.Trim(l, "[]")
			continue
		}
		if k, v, ok := strings.Cut(l, "="); ok && section == "Service" {
			keys[k] = v
		}
	}
	return keys
}

// envSeconds reads a whole-seconds setting from the unit's example
// environment file, or its default when the file leaves it out.
func envSeconds(t *testing.T, env map[string]string, name string, def time.Duration) int {
	t.Helper()
	v, ok := env[name]
	if !ok {
		return int(def / time.Second)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("sluice.env: %s=%q: %v", name, v, err)
	}
	return n
}

func TestSystemdUnitIsHardenedAndOutlastsTheDrain(t *testing.T) {
	keys := unit(t, "systemd/sluice.service")
	for k, want := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "PrivateDevices": "yes", "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"MemoryDenyWriteExecute": "yes", "LockPersonality": "yes", "SystemCallFilter": "@system-service",
		"CapabilityBoundingSet": "", "Restart": "on-failure", "EnvironmentFile": "/etc/sluice/sluice.env",
	} {
		if got, ok := keys[k]; !ok || got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	// The stop timeout must outlast the whole graceful shutdown as the
	// example settings configure it: SHUTDOWN_DELAY_S, DRAIN_TIMEOUT_S and
	// the 5 s given to cut requests to write their answers.
	env := map[string]string{}
	b, err := os.ReadFile("systemd/sluice.env")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = v
		}
	}
	def := config.Default()
	need := envSeconds(t, env, "SHUTDOWN_DELAY_S", def.ShutdownDelay) + envSeconds(t, env, "DRAIN_TIMEOUT_S", def.DrainTimeout) + 5
	stop, err := strconv.Atoi(strings.TrimSuffix(keys["TimeoutStopSec"], "s"))
	if err != nil || stop <= need {
		t.Errorf("TimeoutStopSec=%q, want whole seconds above SHUTDOWN_DELAY_S + DRAIN_TIMEOUT_S + 5 = %d", keys["TimeoutStopSec"], need)
	}
	if _, ok := env["LISTEN_ADDR"]; !ok {
		t.Error("sluice.env sets no LISTEN_ADDR")
	}

	// systemd's own reading: unknown keys and bad values are warnings on
	// its output with a zero exit, so any output fails. verify also wants
	// ExecStart's binary to exist; this test's own binary stands in.
	analyze := tool(t, "systemd-analyze", "apt-get install systemd")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile("systemd/sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "ExecStart=/usr/local/bin/sluice", "ExecStart="+self, 1)
	path := filepath.Join(t.TempDir(), "sluice.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
