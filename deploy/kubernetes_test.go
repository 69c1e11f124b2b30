package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/config"
)

// kustomization is the part of kustomize's Kustomization these files use;
// decoded strictly, so a misspelt field fails here as kustomize would.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels,omitempty"`
	Resources       []string                `json:"resources"`
	Patches         []struct{ Path string } `json:"patches,omitempty"`
	SecretGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"secretGenerator,omitempty"`
	GeneratorOptions *struct {
		DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
	} `json:"generatorOptions,omitempty"`
	Images []struct {
		Name, NewName, NewTag string
	} `json:"images,omitempty"`
}

// manifests is what a kustomization's files hold, by kind, each object
// decoded strictly into its Kubernetes API type.
type manifests struct {
	deployments  map[string]*appsv1.Deployment
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	pdbs         map[string]*policyv1.PodDisruptionBudget
	netpols      map[string]*networkingv1.NetworkPolicy
	secretsFiles map[string][]string // generated Secret -> its keys
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	var k kustomization
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Fatalf("%s/kustomization.yaml: %s %s", dir, k.APIVersion, k.Kind)
	}
	return k
}

// decodeInto decodes one YAML document strictly: a field the API type
// does not have (a typo, a field at the wrong level) fails, as the API
// server's strict field validation would.
func decodeInto(t *testing.T, where string, doc []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	// encoding/json, under UnmarshalStrict, matches field names without
	// regard to case, where the API server does not: readinessprobe would
	// pass above and be dropped by the cluster. Every key of the document
	// must come back, spelt the same, when the decoded object is encoded.
	var orig, back any
	j, err := yaml.YAMLToJSON(doc)
	if err == nil {
		err = json.Unmarshal(j, &orig)
	}
	if err == nil {
		j, err = json.Marshal(into)
	}
	if err == nil {
		err = json.Unmarshal(j, &back)
	}
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	for _, k := range missingKeys("", orig, back) {
		t.Errorf("%s: %s is not a field of %T (spelling and case count)", where, k, into)
	}
}

// missingKeys lists the object keys of a that b lacks, by path.
func missingKeys(path string, a, b any) []string {
	var out []string
	switch av := a.(type) {
	case map[string]any:
		bv, _ := b.(map[string]any)
		for k, v := range av {
			bk, ok := bv[k]
			if !ok {
				out = append(out, path+"."+k)
				continue
			}
			out = append(out, missingKeys(path+"."+k, v, bk)...)
		}
	case []any:
		bv, _ := b.([]any)
		for i, v := range av {
			if i < len(bv) {
				out = append(out, missingKeys(fmt.Sprintf("%s[%d]", path, i), v, bv[i])...)
			}
		}
	}
	return out
}

// load reads a kustomization and the resources it lists (recursively, for
// a base), then applies its patches the way a strategic merge does for the
// fields these patches set: replicas and the pod spec's added fields, and
// a ConfigMap's data key by key.
func load(t *testing.T, dir string) manifests {
	t.Helper()
	k := readKustomization(t, dir)
	m := manifests{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		netpols: map[string]*networkingv1.NetworkPolicy{}, secretsFiles: map[string][]string{},
	}
	for _, r := range k.Resources {
		path := filepath.Join(dir, r)
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			base := load(t, path)
			maps.Copy(m.deployments, base.deployments)
			maps.Copy(m.services, base.services)
			maps.Copy(m.configMaps, base.configMaps)
			maps.Copy(m.pdbs, base.pdbs)
			maps.Copy(m.netpols, base.netpols)
			maps.Copy(m.secretsFiles, base.secretsFiles)
			continue
		}
		for i, doc := range documents(t, path) {
			where := fmt.Sprintf("%s (document %d)", path, i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				o := new(appsv1.Deployment)
				decodeInto(t, where, doc, o)
				m.deployments[o.Name] = o
			case "v1 Service":
				o := new(corev1.Service)
				decodeInto(t, where, doc, o)
				m.services[o.Name] = o
			case "v1 ConfigMap":
				o := new(corev1.ConfigMap)
				decodeInto(t, where, doc, o)
				m.configMaps[o.Name] = o
			case "policy/v1 PodDisruptionBudget":
				o := new(policyv1.PodDisruptionBudget)
				decodeInto(t, where, doc, o)
				m.pdbs[o.Name] = o
			case "networking.k8s.io/v1 NetworkPolicy":
				o := new(networkingv1.NetworkPolicy)
				decodeInto(t, where, doc, o)
				m.netpols[o.Name] = o
			default:
				t.Fatalf("%s: %s %s: no test reads this kind; add it here", where, tm.APIVersion, tm.Kind)
			}
		}
	}
	for _, g := range k.SecretGenerator {
		for _, f := range g.Files {
			key, _, _ := strings.Cut(f, "=")
			m.secretsFiles[g.Name] = append(m.secretsFiles[g.Name], key)
		}
	}
	for _, p := range k.Patches {
		path := filepath.Join(dir, p.Path)
		doc := documents(t, path)
		if len(doc) != 1 {
			t.Fatalf("%s: want one patch document", path)
		}
		var tm metav1.TypeMeta
		yaml.Unmarshal(doc[0], &tm)
		switch tm.Kind {
		case "Deployment":
			o := new(appsv1.Deployment)
			decodeInto(t, path, doc[0], o)
			d := m.deployments[o.Name]
			if d == nil {
				t.Fatalf("%s patches Deployment %s, which the base lacks", path, o.Name)
			}
			if o.Spec.Replicas != nil {
				d.Spec.Replicas = o.Spec.Replicas
			}
			d.Spec.Template.Spec.TopologySpreadConstraints = append(d.Spec.Template.Spec.TopologySpreadConstraints, o.Spec.Template.Spec.TopologySpreadConstraints...)
		case "ConfigMap":
			o := new(corev1.ConfigMap)
			decodeInto(t, path, doc[0], o)
			c := m.configMaps[o.Name]
			if c == nil {
				t.Fatalf("%s patches ConfigMap %s, which the base lacks", path, o.Name)
			}
			c = c.DeepCopy()
			maps.Copy(c.Data, o.Data)
			m.configMaps[o.Name] = c
		default:
			t.Fatalf("%s: a patch of a %s; teach the test to merge it", path, tm.Kind)
		}
	}
	return m
}

func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

func TestKubernetesBase(t *testing.T) {
	m := load(t, "kubernetes")
	checkSluice(t, m, 1)
	k := readKustomization(t, "kubernetes")
	if k.GeneratorOptions == nil || !k.GeneratorOptions.DisableNameSuffixHash {
		t.Error("the Secrets get hashed names, which the Deployment's fixed names would miss")
	}
	// Kustomize reads the secrets from files in secrets/, which git must
	// never take.
	gi, err := os.ReadFile("kubernetes/secrets/.gitignore")
	if err != nil || !strings.Contains(string(gi), "\n*\n") {
		t.Errorf("kubernetes/secrets/.gitignore does not ignore the key files: %v", err)
	}
	for _, g := range k.SecretGenerator {
		for _, f := range g.Files {
			_, src, _ := strings.Cut(f, "=")
			if !strings.HasPrefix(src, "secrets/") {
				t.Errorf("secret %s reads %s, outside the ignored secrets/", g.Name, src)
			}
		}
	}
}

func TestKubernetesRedisOverlay(t *testing.T) {
	m := load(t, "kubernetes/overlays/redis")
	env := checkSluice(t, m, 3)
	cfg := loadSettings(t, env)
	if cfg.GateBackend != config.GateRedis {
		t.Fatalf("GATE_BACKEND=%s, want redis", cfg.GateBackend)
	}
	// REDIS_URL names the overlay's Redis Service and its port.
	host, port, err := net.SplitHostPort(strings.TrimPrefix(cfg.RedisURL, "redis://"))
	if err != nil {
		t.Fatalf("REDIS_URL %q: %v", cfg.RedisURL, err)
	}
	svc := m.services[host]
	if svc == nil {
		t.Fatalf("REDIS_URL names %s, no Service of the overlay", host)
	}
	if p := servicePort(svc, port); p == nil {
		t.Errorf("Service %s has no port %s", host, port)
	}
	rd := m.deployments[host]
	if rd == nil || !selects(svc.Spec.Selector, rd.Spec.Template.Labels) {
		t.Fatalf("Service %s selects no Deployment's pods", host)
	}
	np := m.netpols[host]
	if np == nil || !selects(np.Spec.PodSelector.MatchLabels, rd.Spec.Template.Labels) ||
		len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 ||
		!selects(np.Spec.Ingress[0].From[0].PodSelector.MatchLabels, m.deployments["sluice"].Spec.Template.Labels) {
		t.Errorf("no NetworkPolicy lets sluice's pods, and only them, reach Redis")
	}
	if cfg.GateReplicas != 0 && cfg.GateReplicas != int(*m.deployments["sluice"].Spec.Replicas) {
		t.Errorf("GATE_REPLICAS=%d with %d replicas", cfg.GateReplicas, *m.deployments["sluice"].Spec.Replicas)
	}
	checkHardened(t, "sluice-redis", &rd.Spec.Template.Spec)
}

// loadSettings reads the ConfigMap's data as sluice reads its environment:
// every name must be a setting and every value one sluice accepts.
func loadSettings(t *testing.T, env map[string]string) config.Config {
	t.Helper()
	known := map[string]bool{}
	for _, s := range config.Settings {
		known[s.Env] = true
	}
	for k := range env {
		if !known[k] {
			t.Errorf("the ConfigMap sets %s, which is no sluice setting", k)
		}
	}
	for _, secret := range []string{"ANTHROPIC_API_KEY", "BULK_SECRET", "BULK_WEBHOOK_SECRET"} {
		if _, ok := env[secret]; ok {
			t.Errorf("the ConfigMap holds %s: keys belong in a Secret", secret)
		}
	}
	if u := env["REDIS_URL"]; strings.Contains(u, "@") {
		t.Errorf("REDIS_URL holds a password in the ConfigMap")
	}
	cfg, err := config.Load(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("sluice would not start with the ConfigMap: %v", err)
	}
	return cfg
}

func selects(sel, podLabels map[string]string) bool {
	return len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(podLabels))
}

func servicePort(s *corev1.Service, port string) *corev1.ServicePort {
	for i, p := range s.Spec.Ports {
		if strconv.Itoa(int(p.Port)) == port {
			return &s.Spec.Ports[i]
		}
	}
	return nil
}

// containerPort finds the container port a probe or a Service names, by
// name or number.
func containerPort(c *corev1.Container, p intstr.IntOrString) *corev1.ContainerPort {
	for i, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return &c.Ports[i]
		}
	}
	return nil
}

// checkSluice checks sluice's Deployment, Service, PDB and ConfigMap
// against each other and against what sluice serves and reads; it returns
// the ConfigMap's settings.
func checkSluice(t *testing.T, m manifests, replicas int32) map[string]string {
	t.Helper()
	d := m.deployments["sluice"]
	if d == nil {
		t.Fatal("no Deployment sluice")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
		t.Errorf("replicas %s, want %d", show(d.Spec.Replicas), replicas)
	}
	pod := d.Spec.Template
	if !selects(d.Spec.Selector.MatchLabels, pod.Labels) {
		t.Error("the Deployment's selector does not select its own pods")
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Error("a rolling update may take a pod down before its replacement is ready: maxUnavailable should be 0")
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want sluice alone", len(pod.Spec.Containers))
	}
	c := &pod.Spec.Containers[0]

	// The settings: from the ConfigMap the container reads whole.
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || len(c.Env) != 0 {
		t.Fatalf("the container should take its settings from one ConfigMap, and only there")
	}
	cm := m.configMaps[c.EnvFrom[0].ConfigMapRef.Name]
	if cm == nil {
		t.Fatalf("no ConfigMap %s", c.EnvFrom[0].ConfigMapRef.Name)
	}
	cfg := loadSettings(t, cm.Data)

	// The ports sluice listens on are the container's, named, and the
	// Service's targets.
	_, listenPort, _ := net.SplitHostPort(cfg.ListenAddr)
	_, adminPort, _ := net.SplitHostPort(cfg.AdminListenAddr)
	for name, want := range map[string]string{"http": listenPort, "admin": adminPort} {
		cp := containerPort(c, intstr.FromString(name))
		if cp == nil || strconv.Itoa(int(cp.ContainerPort)) != want {
			t.Errorf("container port %s: %v, want %s (from LISTEN_ADDR=%s, ADMIN_LISTEN_ADDR=%s)", name, cp, want, cfg.ListenAddr, cfg.AdminListenAddr)
		}
	}
	if strings.HasPrefix(cfg.ListenAddr, "127.") || strings.HasPrefix(cfg.AdminListenAddr, "127.") {
		t.Error("a loopback address in a pod is reached by nothing outside it: no probe, no Service")
	}
	svc := m.services["sluice"]
	if svc == nil || !selects(svc.Spec.Selector, pod.Labels) {
		t.Fatal("no Service sluice selecting the pods")
	}
	for _, sp := range svc.Spec.Ports {
		if containerPort(c, sp.TargetPort) == nil {
			t.Errorf("Service port %s targets %s, no port of the container", sp.Name, sp.TargetPort.String())
		}
	}

	// The probes: readiness on /readyz (503 from SIGTERM on, for
	// SHUTDOWN_DELAY_S), liveness on /healthz, on the API port.
	for _, pr := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil || pr.probe.HTTPGet.Path != pr.path {
			t.Errorf("%s probe: want GET %s", pr.what, pr.path)
			continue
		}
		if cp := containerPort(c, pr.probe.HTTPGet.Port); cp == nil || strconv.Itoa(int(cp.ContainerPort)) != listenPort {
			t.Errorf("%s probe on port %s, want LISTEN_ADDR's %s", pr.what, pr.probe.HTTPGet.Port.String(), listenPort)
		}
	}
	// The readiness probe must see the 503 within SHUTDOWN_DELAY_S, or
	// the Service sends requests to a pod that no longer accepts them.
	if rp := c.ReadinessProbe; rp != nil {
		seen := rp.PeriodSeconds * max(rp.FailureThreshold, 1)
		if seen <= 0 || int64(seen) >= int64(cfg.ShutdownDelay.Seconds()) {
			t.Errorf("readiness takes up to %d s to see a draining pod (periodSeconds x failureThreshold), not under SHUTDOWN_DELAY_S=%v", seen, cfg.ShutdownDelay)
		}
	}
	// The kubelet's SIGKILL must come after the whole graceful shutdown.
	need := int64(cfg.ShutdownDelay.Seconds() + cfg.DrainTimeout.Seconds() + 5)
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g <= need {
		t.Errorf("terminationGracePeriodSeconds %s, want above SHUTDOWN_DELAY_S + DRAIN_TIMEOUT_S + 5 = %d", show(g), need)
	}

	// Prometheus scrapes /metrics on the admin port.
	a := pod.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" || a["prometheus.io/port"] != adminPort {
		t.Errorf("scrape annotations %v, want /metrics on ADMIN_LISTEN_ADDR's port %s", a, adminPort)
	}

	// Resources: requests for scheduling, a memory limit above the body
	// budget.
	mem := c.Resources.Limits.Memory()
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || mem.IsZero() {
		t.Error("the container needs cpu and memory requests and a memory limit")
	} else if mem.Value() < 2*cfg.BodyBudget {
		t.Errorf("memory limit %s is under twice BODY_BUDGET_MB (%d MiB)", mem, cfg.BodyBudget>>20)
	}

	checkHardened(t, "sluice", &pod.Spec)
	// The image's user (cmd/sluice-image), which owns its /data.
	if psc := pod.Spec.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Error("runAsUser should be the image's user, 65532")
	}

	// Writable paths are volumes (the root is read-only): DATA_DIR, and
	// the key files are in a mount of the Secrets.
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = vm
	}
	if vm, ok := mounts[cfg.DataDir]; !ok || vm.ReadOnly {
		t.Errorf("DATA_DIR=%s is not a writable volume", cfg.DataDir)
	}
	for setting, path := range map[string]string{"INBOUND_KEYS_FILE": cfg.InboundKeysFile, "UPSTREAM_KEY_FILE": cfg.UpstreamKeyFile} {
		vm, ok := mounts[filepath.Dir(path)]
		if !ok || !vm.ReadOnly {
			t.Errorf("%s=%s: its directory is no read-only mount", setting, path)
			continue
		}
		if !secretHasKey(pod.Spec.Volumes, vm.Name, filepath.Base(path), m.secretsFiles) {
			t.Errorf("%s=%s: volume %s has no Secret with the key %s", setting, path, vm.Name, filepath.Base(path))
		}
	}

	// The PodDisruptionBudget covers these pods.
	pdb := m.pdbs["sluice"]
	if pdb == nil || pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, pod.Labels) {
		t.Error("no PodDisruptionBudget selecting sluice's pods")
	} else if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() < 1 {
		t.Error("the PodDisruptionBudget must let a drain evict a pod (maxUnavailable >= 1)")
	}
	return cm.Data
}

// secretHasKey says whether volume name projects a generated Secret that
// holds key.
func secretHasKey(vols []corev1.Volume, name, key string, secrets map[string][]string) bool {
	for _, v := range vols {
		if v.Name != name {
			continue
		}
		var names []string
		if v.Secret != nil {
			names = append(names, v.Secret.SecretName)
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					names = append(names, s.Secret.Name)
				}
			}
		}
		for _, n := range names {
			if slices.Contains(secrets[n], key) {
				return true
			}
		}
	}
	return false
}

// checkHardened: non-root, a read-only root, no privilege escalation, no
// capability, the runtime's seccomp profile, no service account token.
func checkHardened(t *testing.T, what string, spec *corev1.PodSpec) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: the pod must run as a non-root user (runAsNonRoot, runAsUser)", what)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: no RuntimeDefault seccomp profile", what)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s: mounts a service account token it never uses", what)
	}
	for _, c := range spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			(sc.Privileged != nil && *sc.Privileged) ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: container %s must drop all capabilities, have a read-only root and no privilege escalation", what, c.Name)
		}
	}
}

// show prints a pointer's value, or "unset".
func show[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// A misspelt field must fail the strict decoding the tests rely on.
func TestKubernetesDecodingRefusesUnknownFields(t *testing.T) {
	var d appsv1.Deployment
	err := yaml.UnmarshalStrict([]byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  replica: 3\n"), &d)
	if err == nil || !strings.Contains(err.Error(), "replica") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
	// A field in the wrong case passes encoding/json; decodeInto's
	// round trip catches it.
	doc := []byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  Replicas: 3\n")
	if got := missingKeys("", map[string]any{"spec": map[string]any{"Replicas": 3}}, roundTrip(t, doc)); !slices.Equal(got, []string{".spec.Replicas"}) {
		t.Errorf("a field in the wrong case: missing keys %v", got)
	}
}

func roundTrip(t *testing.T, doc []byte) any {
	t.Helper()
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(doc, &d); err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(&d)
	var back any
	json.Unmarshal(j, &back)
	return back
}
