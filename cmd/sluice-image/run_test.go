package main

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// The image is started as operators start it and probed from outside:
// /healthz, /readyz, one Messages request through it to `sluice sim`, and
// SIGTERM, answered by /readyz turning 503, the request in flight
// finishing, and an exit within the drain time.
//
// podman_test.go runs the image in podman with runc (podman's default
// runtime, crun, refuses cgroups in hybrid mode). This test, by default,
// does what an engine does, minus the cgroups and the network namespace: it unpacks the
// image's layers into a directory and starts the config's entrypoint with
// the config's environment, working directory and user, chrooted there in
// a new user and mount namespace (`unshare -Urm` plus a mapping for the
// image's user). The process shares the host's network, so LISTEN_ADDR is
// set to a loopback port, as `docker run -e` would. With
// SLUICE_IMAGE_ENGINE=docker or podman, or with a docker daemon that
// answers, the same test loads the docker archive and runs it with the
// engine instead (--network host).
func TestImageServesProbesAMessageAndDrains(t *testing.T) {
	img, p, out := hostImage(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	simBin := filepath.Join(t.TempDir(), "sim-rootfs")
	unpack(t, img, simBin)
	// `sluice sim` from the image's own binary, run plainly on the host.
	sim := exec.Command(filepath.Join(simBin, "usr/local/bin/sluice"), "sim", "--listen", "127.0.0.1:0", "--ttft", "1500ms", "--per-token", "1ms")
	simAddr := startAndFind(t, sim, regexp.MustCompile(`on http://(127\.0\.0\.1:\d+)`))

	// What an operator would pass with -e: loopback on the shared network,
	// the simulator, and a short shutdown.
	overrides := []string{"LISTEN_ADDR=127.0.0.1:0", "UPSTREAM_URL=http://" + simAddr, "BATCH_ENABLED=1",
		"LOG_FORMAT=json", "SHUTDOWN_DELAY_S=2", "DRAIN_TIMEOUT_S=10"}
	var cmd *exec.Cmd
	switch engine := pickEngine(t); engine {
	case "":
		rootfs := filepath.Join(t.TempDir(), "rootfs")
		unpack(t, img, rootfs)
		cmd = namespaced(t, rootfs, cf.Config, overrides)
	default:
		cmd = withEngine(t, engine, filepath.Join(out, archiveName(p)), cf, overrides)
	}
	listening := regexp.MustCompile(`"msg":"sluice listening","addr":"(127\.0\.0\.1:\d+)"`)
	addr := startAndFind(t, cmd, listening)
	base := "http://" + addr
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Timeout: 20 * time.Second, Transport: tr}

	if cmd.SysProcAttr != nil && cmd.SysProcAttr.Chroot != "" {
		// The process runs as the image's user: 65532, mapped 1:1.
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^Uid:\t65532\t65532\t65532\t65532$`).Match(status) {
			t.Errorf("sluice does not run as 65532:\n%s", status)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, client, base+path); code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
	}
	if code, body := message(client, base); code != 200 || !strings.Contains(body, `"type":"message"`) {
		t.Fatalf("POST /v1/messages through the image: %d %s", code, body)
	}

	// A request in flight (the simulator takes 1.5 s to its first token)
	// when SIGTERM comes: /readyz turns 503 for SHUTDOWN_DELAY_S, the
	// request finishes, and sluice exits 0 within delay + drain.
	type answer struct {
		code int
		body string
	}
	inflight := make(chan answer, 1)
	go func() {
		code, body := message(client, base)
		inflight <- answer{code, body}
	}()
	time.Sleep(300 * time.Millisecond) // let the request reach the window and the simulator
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The signal reaches the process a moment after kill returns, and its
	// handler flips readiness after that: ask until /readyz turns, within
	// the first second of the two SHUTDOWN_DELAY_S gives (a kubelet probes
	// every few seconds; what matters is that it sees 503 before the drain).
	code, body := get(t, client, base+"/readyz")
	for code == 200 && time.Since(sent) < time.Second {
		time.Sleep(20 * time.Millisecond)
		code, body = get(t, client, base+"/readyz")
	}
	if code != 503 {
		t.Errorf("GET /readyz %v into SHUTDOWN_DELAY_S: %d %s, want 503", time.Since(sent).Round(time.Millisecond), code, body)
	}
	if a := <-inflight; a.code != 200 {
		t.Errorf("the request in flight at SIGTERM: %d %s", a.code, a.body)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("sluice exited: %v, want 0 after a graceful drain", err)
		}
		t.Logf("SIGTERM answered in %v (SHUTDOWN_DELAY_S=2, DRAIN_TIMEOUT_S=10)", time.Since(sent).Round(time.Millisecond))
	case <-time.After(2*time.Second + 10*time.Second + 5*time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("sluice did not exit within SHUTDOWN_DELAY_S + DRAIN_TIMEOUT_S + 5 s of SIGTERM")
	}
}

// pickEngine returns the container engine to run the image with, or ""
// for the namespace. CI needs user namespaces when it has no engine.
func pickEngine(t *testing.T) string {
	t.Helper()
	if e := os.Getenv("SLUICE_IMAGE_ENGINE"); e != "" && e != "namespace" {
		return e
	}
	if os.Getenv("SLUICE_IMAGE_ENGINE") == "" {
		if err := exec.Command("docker", "info").Run(); err == nil {
			return "docker"
		}
	}
	// Can this process make a user and mount namespace, map the image's
	// user and chroot? The same as `unshare -Urm chroot DIR /bin/true`.
	probe := exec.Command("/bin/true")
	probe.SysProcAttr = nsAttr("/", 0)
	if err := probe.Run(); err != nil {
		msg := fmt.Sprintf("cannot start a process in a new user and mount namespace as uid 65532 (%v): this needs root, or a kernel that allows user namespaces (sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces)", err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return ""
}

// nsAttr starts a process in new user and mount namespaces with root and
// the image's user mapped to themselves, chrooted to root, as uid (and gid).
// The child chroots while still root in its namespace, then drops to uid,
// losing every capability, before it execs.
func nsAttr(root string, uid int) *syscall.SysProcAttr {
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: 65532, HostID: 65532, Size: 1}}
	return &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: m, GidMappings: m,
		// The child clears its supplementary groups as it drops to uid,
		// which a namespace whose setgroups is denied would refuse.
		GidMappingsEnableSetgroups: true,
		Chroot:                     root,
		Credential:                 &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)},
	}
}

// namespaced runs the image's config in rootfs: its entrypoint and cmd,
// its environment with overrides on top, its working directory and user.
func namespaced(t *testing.T, rootfs string, c v1.Config, overrides []string) *exec.Cmd {
	t.Helper()
	argv := append(append([]string{}, c.Entrypoint...), c.Cmd...)
	if len(argv) == 0 {
		t.Fatal("the image has no entrypoint")
	}
	u, g, ok := strings.Cut(c.User, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid != gid {
		t.Fatalf("user %q: want numeric uid:gid, the same", c.User)
	}
	// An absolute path is not looked up on the host: the child execs it
	// after the chroot, as the image names it.
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append([]string{}, c.Env...), overrides...)
	cmd.Dir = c.WorkingDir // taken after the chroot
	cmd.SysProcAttr = nsAttr(rootfs, uid)
	return cmd
}

// withEngine loads the docker archive into a container engine and runs it
// on the host's network.
func withEngine(t *testing.T, engine, archive string, cf *v1.ConfigFile, overrides []string) *exec.Cmd {
	t.Helper()
	out, err := exec.Command(engine, "load", "-i", archive).CombinedOutput()
	if err != nil {
		t.Fatalf("%s load: %v\n%s", engine, err, out)
	}
	ref := "sluice:" + strings.ReplaceAll(cf.Config.Labels["org.opencontainers.image.version"], "+", "-")
	args := []string{"run", "--rm", "--network", "host", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"}
	for _, o := range overrides {
		args = append(args, "-e", o)
	}
	// docker run forwards the signals it gets to the container.
	return exec.Command(engine, append(args, ref)...)
}

// startAndFind starts cmd and returns the first submatch of re in its
// stderr (or stdout), failing after 60 s; the process is killed at cleanup
// if still running.
func startAndFind(t *testing.T, cmd *exec.Cmd, re *regexp.Regexp) string {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		pw.Close()
	})
	found := make(chan string, 1)
	var seen strings.Builder
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if seen.Len() < 16<<10 {
				seen.WriteString(sc.Text() + "\n")
			}
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case s := <-found:
		return s
	case <-time.After(60 * time.Second):
		t.Fatalf("%s printed no %s within 60 s", cmd.Args, re)
		return ""
	}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func message(c *http.Client, base string) (int, string) {
	req, _ := http.NewRequest("POST", base+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-test")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// unpack writes the image's flattened file system into dir, with the
// modes and (as root) the owners the layers give.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err == nil {
				_, err = io.Copy(f, tr)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		default:
			t.Fatalf("%s: an entry of type %c; the image holds only files and directories", h.Name, h.Typeflag)
		}
		if err == nil {
			err = os.Chmod(name, os.FileMode(h.Mode&0o777)|modeBits(h.Mode))
		}
		if err == nil && os.Geteuid() == 0 {
			err = os.Lchown(name, h.Uid, h.Gid)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func modeBits(m int64) os.FileMode {
	var fm os.FileMode
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}
