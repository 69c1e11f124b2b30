package overhead

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/config"
)

// tail is the end of a child's stderr, for an error that may be its fault.
func (t *target) tail() string {
	if t.stderr == nil {
		return ""
	}
	b, _ := os.ReadFile(t.stderr.Name())
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	return "\n" + t.name + "'s stderr ends:\n" + string(b)
}

// startServerChild starts a child that serves (the instant upstream, the
// go-proxy) and returns its address, the first line it writes.
func startServerChild(ctx context.Context, exe, dir string, sp childSpec) (*target, string, error) {
	spec, _ := json.Marshal(sp)
	t := &target{name: sp.Role, cmd: exec.CommandContext(ctx, exe)}
	t.cmd.Env = append(os.Environ(), ChildEnv+"="+string(spec))
	t.cmd.SysProcAttr = orphanless()
	out, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if t.stderr, err = os.Create(filepath.Join(dir, sp.Role+".stderr")); err != nil {
		return nil, "", err
	}
	t.cmd.Stderr = t.stderr
	if err := t.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("overhead: start the %s: %w", sp.Role, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop(t)
		return nil, "", fmt.Errorf("overhead: the %s said no address: %w%s", sp.Role, err, t.tail())
	}
	return t, strings.TrimSpace(line), nil
}

// startSluice starts `sluice serve` on a free port against upstream, with
// env over a clean environment (no setting of the caller's own), and
// waits until it answers /healthz.
func startSluice(ctx context.Context, exe, name, upstream, dir string, pprof bool, env []string) (*target, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	t := &target{name: name, url: "http://" + addr, sluice: true, cmd: exec.CommandContext(ctx, exe, "serve")}
	t.cmd.Env = append(cleanEnv(), "LISTEN_ADDR="+addr, "UPSTREAM_URL="+upstream)
	if pprof {
		if t.pprof, err = freeAddr(); err != nil {
			return nil, err
		}
		t.cmd.Env = append(t.cmd.Env, "PPROF_LISTEN_ADDR="+t.pprof)
	}
	t.cmd.Env = append(t.cmd.Env, env...)
	if t.stderr, err = os.Create(filepath.Join(dir, name+".stderr")); err != nil {
		return nil, err
	}
	t.cmd.Stdout, t.cmd.Stderr = io.Discard, t.stderr
	t.cmd.SysProcAttr = orphanless()
	t.cmd.Cancel = func() error { return t.cmd.Process.Signal(syscall.SIGTERM) }
	t.cmd.WaitDelay = 10 * time.Second
	if err := t.cmd.Start(); err != nil {
		return nil, fmt.Errorf("overhead: start sluice (%s): %w", name, err)
	}
	if err := waitReady(ctx, t.url+"/healthz", t.cmd); err != nil {
		stop(t)
		return nil, fmt.Errorf("overhead: sluice (%s): %w%s", name, err, t.tail())
	}
	return t, nil
}

// cleanEnv is this process's environment without sluice's settings, so
// that a setting exported in the caller's shell does not change what is
// measured.
func cleanEnv() []string {
	skip := map[string]bool{ChildEnv: true}
	for _, s := range config.Settings {
		skip[s.Env] = true
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !skip[k] {
			env = append(env, kv)
		}
	}
	return env
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls url until it answers 200, cmd exits, or 15 s pass.
func waitReady(ctx context.Context, url string, cmd *exec.Cmd) error {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if cmd.ProcessState != nil {
			return errors.New("exited")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not answer 200 within 15 s", url)
}

// stop ends a child: SIGTERM, then a kill if it lingers.
func stop(t *target) {
	if t == nil || t.cmd == nil || t.cmd.Process == nil {
		return
	}
	if t.cmd.ProcessState == nil {
		t.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { t.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.cmd.Process.Kill()
			<-done
		}
	}
	if t.stderr != nil {
		t.stderr.Close()
	}
	t.cmd = nil
}

// runLoad runs one load generator and returns what it measured.
func runLoad(ctx context.Context, exe string, sp childSpec) (*loadResult, error) {
	timeout := sp.Warmup + sp.Duration + 2*time.Minute
	if sp.Long != nil {
		timeout += time.Duration(sp.Long.Bursts) * sp.Long.Pause // the streams open at the end finish
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	spec, _ := json.Marshal(sp)
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), ChildEnv+"="+string(spec))
	cmd.SysProcAttr = orphanless()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("load generator: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var res loadResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("load generator's answer: %w", err)
	}
	if res.Requests == 0 {
		return nil, fmt.Errorf("no request answered (%d errors; the first: %s)", res.Errors, res.FirstErr)
	}
	return &res, nil
}

// fetchProfile saves a pprof endpoint's answer to file.
func fetchProfile(ctx context.Context, addr, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: status %d", path, resp.StatusCode)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// orphanless makes a child end with the benchmark, even when the
// benchmark is killed.
func orphanless() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
