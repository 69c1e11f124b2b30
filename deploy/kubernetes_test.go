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
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// load reads a kustomization and the resources it lists (recursively, for
// a base), then applies its patches the way a strategic merge does for the
// fields these patches set: replicas and the pod spec's added fields, and
// a ConfigMap's data key by key.
func load(t *testing.T, dir string) manifests {
	t.Helper()
	k := readKustomization(t, dir)
	m := newManifests()
	for _, r := range k.Resources {
		path := filepath.Join(dir, r)
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			m.merge(load(t, path))
			continue
		}
		for i, doc := range documents(t, path) {
			m.add(t, fmt.Sprintf("%s (document %d)", path, i+1), doc)
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
	return splitDocuments(b)
}

// splitDocuments splits a YAML stream at its "---" lines, dropping empty
// documents (a template that rendered nothing, a comment alone).
func splitDocuments(b []byte) [][]byte {
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
	checkSluice(t, m, "sluice", 1)
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
	env := checkSluice(t, m, "sluice", 3)
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
