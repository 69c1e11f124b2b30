package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The image in a real container engine, as operators run it: Debian's
// podman with runc (its default, crun, refuses the cgroups of the
// machines CI runs on), cgroupfs, the host's network. It serves a
// Messages request from `sluice sim`, answers /readyz, and on `podman
// stop` drains and exits 0. Podman keeps its images and containers in
// directories of the test's own, removed after it, so nothing leaks into
// the machine's storage. In CI a missing podman or runc fails the test.
func TestImageRunsInPodmanWithRunc(t *testing.T) {
	for _, tool := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := tool + " is not installed (apt-get install podman runc): " + err.Error()
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	if os.Geteuid() != 0 && os.Getenv("CI") == "" {
		t.Skip("runs podman as root, with its storage in the test's directories; run as root")
	}
	img, p, out := hostImage(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	simRoot := filepath.Join(t.TempDir(), "sim-rootfs")
	unpack(t, img, simRoot)
	sim := exec.Command(filepath.Join(simRoot, "usr/local/bin/sluice"), "sim", "--listen", "127.0.0.1:0")
	simAddr := startAndFind(t, sim, regexp.MustCompile(`on http://(127\.0\.0\.1:\d+)`))

	// Short: podman refuses a runroot over 50 characters, which
	// t.TempDir's names exceed.
	store, err := os.MkdirTemp("", "podman")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(store) })
	podman := func(args ...string) *exec.Cmd {
		global := []string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"),
			"--tmpdir", filepath.Join(store, "tmp"), "--storage-driver", "vfs", "--events-backend", "none",
			"--runtime", "runc", "--cgroup-manager=cgroupfs"}
		cmd := exec.Command("podman", append(global, args...)...)
		cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(store, "tmp"))
		return cmd
	}
	if err := os.MkdirAll(filepath.Join(store, "tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	name := "sluice-test-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	t.Cleanup(func() {
		podman("rm", "-f", "-t", "0", name).Run()
		podman("rmi", "-a", "-f").Run()
		podman("system", "reset", "-f").Run()
	})
	if b, err := podman("load", "-i", filepath.Join(out, archiveName(p))).CombinedOutput(); err != nil {
		t.Fatalf("podman load: %v\n%s", err, b)
	}
	ref := "sluice:" + strings.ReplaceAll(cf.Config.Labels["org.opencontainers.image.version"], "+", "-")

	run := podman("run", "--name", name, "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096",
		"--network=host", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"-e", "LISTEN_ADDR=127.0.0.1:0", "-e", "UPSTREAM_URL=http://"+simAddr, "-e", "BATCH_ENABLED=1",
		"-e", "LOG_FORMAT=json", "-e", "SHUTDOWN_DELAY_S=1", "-e", "DRAIN_TIMEOUT_S=10", ref)
	addr := startAndFind(t, run, regexp.MustCompile(`"msg":"sluice listening","addr":"(127\.0\.0\.1:\d+)"`))
	base := "http://" + addr
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Timeout: 20 * time.Second, Transport: tr}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, client, base+path); code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
	}
	if code, body := message(client, base); code != 200 || !strings.Contains(body, `"type":"message"`) {
		t.Fatalf("POST /v1/messages through podman: %d %s", code, body)
	}
	// The container runs as the image's user, with the limits asked for.
	if b, err := podman("exec", name, "/usr/local/bin/sluice", "version").CombinedOutput(); err != nil || !strings.Contains(string(b), cf.Config.Labels["org.opencontainers.image.revision"]) {
		t.Errorf("sluice version in the container: %v\n%s", err, b)
	}

	// podman stop sends SIGTERM (the image's StopSignal) and waits: sluice
	// drains and exits 0 well within its 30 s.
	stopped := time.Now()
	if b, err := podman("stop", "-t", "30", name).CombinedOutput(); err != nil {
		t.Fatalf("podman stop: %v\n%s", err, b)
	}
	t.Logf("podman stop took %v (SHUTDOWN_DELAY_S=1, DRAIN_TIMEOUT_S=10)", time.Since(stopped).Round(time.Millisecond))
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("podman run exited: %v, want 0 after a graceful drain", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("podman run did not return within 30 s of podman stop")
	}
	b, err := podman("inspect", "--format", "{{.State.ExitCode}}", name).Output()
	if err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Errorf("the container's exit code: %q %v, want 0", b, err)
	}
	logs, err := podman("logs", name).CombinedOutput()
	if err != nil {
		t.Fatalf("podman logs: %v\n%s", err, logs)
	}
	for _, want := range []string{`"msg":"shutdown signalled: /readyz answers 503`, `"msg":"shutting down"`} {
		if !strings.Contains(string(logs), want) {
			t.Errorf("the container's log lacks %s:\n%s", want, logs)
		}
	}
	if strings.Contains(string(logs), "drain timeout passed") {
		t.Errorf("the drain was cut:\n%s", logs)
	}
}
