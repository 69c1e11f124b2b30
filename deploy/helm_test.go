package deploy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	v2util "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/config"
)

// The chart is rendered with Helm's own library, as `helm template` and
// `helm install` render it, and the objects are checked by the same
// checkSluice as the kustomize manifests. Bitnami's redis and postgresql
// charts are dependencies the chart declares but does not vendor (fetching
// them needs a registry): the renders here have them disabled, or enabled
// without their templates, which checks what the chart itself wires to
// them.

const chartDir = "helm/sluice"

// render renders the chart with values as release rel; an error is what
// helm install would print (a `fail` of the chart's validation).
func render(t *testing.T, rel, values string) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatal(err)
	}
	if err := v2util.ProcessDependencies(ch, vals); err != nil {
		t.Fatal(err)
	}
	top, err := chartutil.ToRenderValues(ch, vals, common.ReleaseOptions{Name: rel, Namespace: "team", IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, top)
}

// renderedManifests decodes a rendering; secrets are the Secrets the
// operator made and named in the values, with their keys.
func renderedManifests(t *testing.T, out map[string]string, secrets map[string][]string) manifests {
	t.Helper()
	m := newManifests()
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for i, doc := range splitDocuments([]byte("\n" + out[name] + "\n")) {
			if onlyComments(doc) {
				continue
			}
			m.add(t, fmt.Sprintf("%s (document %d)", name, i+1), doc)
		}
	}
	maps.Copy(m.secretsFiles, secrets)
	return m
}

func onlyComments(doc []byte) bool {
	for l := range strings.Lines(string(doc)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// The default values: one replica, the Secrets of the kustomize base.
func TestHelmDefaults(t *testing.T) {
	out, err := render(t, "sluice", "")
	if err != nil {
		t.Fatal(err)
	}
	m := renderedManifests(t, out, map[string][]string{
		"sluice-inbound-keys": {"inbound-keys.json"}, "sluice-upstream-key": {"upstream-key"},
	})
	cfg := loadSettings(t, checkSluice(t, m, "sluice", 1))
	if cfg.GateBackend != config.GateLocal {
		t.Errorf("GATE_BACKEND=%s with one replica and no Redis", cfg.GateBackend)
	}
	if len(m.serviceMonitors) != 0 {
		t.Error("a ServiceMonitor by default: its CRD may not be installed")
	}
	if m.services["sluice-admin"] == nil {
		t.Error("no admin Service of its own")
	}
}

// A team's values: three replicas, Redis and PostgreSQL by URL from
// Secrets, a ServiceMonitor, settings from a Secret in extraEnv.
const teamValues = `
replicaCount: 3
image: {repository: registry.example.com/team/sluice, tag: v1.2.3}
settings:
  BATCH_ENABLED: "1"
  BATCH_MAX_CONCURRENCY: "24"
  BULK_ENABLED: "1"
  LOG_FORMAT: json
inboundKeys: {existingSecret: team-keys, key: keys.json}
upstreamKey: {existingSecret: team-anthropic, key: api-key}
redis: {existingSecret: team-redis, existingSecretKey: url}
postgresql: {existingSecret: team-postgres, existingSecretKey: dsn}
serviceMonitor: {enabled: true, labels: {release: kube-prometheus}}
shutdownDelaySeconds: 8
drainTimeoutSeconds: 120
extraEnv:
  - name: ADMIN_KEY
    valueFrom: {secretKeyRef: {name: team-admin, key: admin-key}}
`

func TestHelmTeamValues(t *testing.T) {
	out, err := render(t, "team", teamValues)
	if err != nil {
		t.Fatal(err)
	}
	m := renderedManifests(t, out, map[string][]string{
		"team-keys": {"keys.json"}, "team-anthropic": {"api-key"},
	})
	env := checkSluice(t, m, "team-sluice", 3)
	cfg := loadSettings(t, env)
	if cfg.GateBackend != config.GateRedis || cfg.GateReplicas != 3 {
		t.Errorf("GATE_BACKEND=%s GATE_REPLICAS=%d, want redis and 3", cfg.GateBackend, cfg.GateReplicas)
	}
	if cfg.SpendStore != config.SpendStorePostgres || !strings.HasPrefix(env["BULK_STORE"], "postgres://") {
		t.Errorf("SPEND_STORE=%v BULK_STORE=%q, want both PostgreSQL", cfg.SpendStore, env["BULK_STORE"])
	}
	if len(m.serviceMonitors) != 1 || m.serviceMonitors["team-sluice"].Labels["release"] != "kube-prometheus" {
		t.Errorf("ServiceMonitors %v, want team-sluice with the team's label", slices.Collect(maps.Keys(m.serviceMonitors)))
	}
	d := m.deployments["team-sluice"]
	if g := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != 8+120+10 {
		t.Errorf("terminationGracePeriodSeconds %d, want 138", g)
	}
	if len(d.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
		t.Error("three replicas may land on one node")
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "registry.example.com/team/sluice:v1.2.3" {
		t.Errorf("image %s", img)
	}
}

// Bitnami's charts as dependencies: the chart points sluice at their
// Services and at the password Secret postgresql makes.
func TestHelmDependencies(t *testing.T) {
	out, err := render(t, "dep", "replicaCount: 2\nredis: {enabled: true}\npostgresql: {enabled: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	m := renderedManifests(t, out, map[string][]string{
		"sluice-inbound-keys": {"inbound-keys.json"}, "sluice-upstream-key": {"upstream-key"},
	})
	env := checkSluice(t, m, "dep-sluice", 2)
	if env["REDIS_URL"] != "redis://dep-redis-master:6379" {
		t.Errorf("REDIS_URL=%q, want Bitnami's master Service", env["REDIS_URL"])
	}
	if want := "postgres://sluice:" + placeholder("SLUICE_POSTGRES_PASSWORD") + "@dep-postgresql:5432/sluice"; env["SPEND_STORE"] != want || env["BULK_STORE"] != want {
		t.Errorf("SPEND_STORE=%q BULK_STORE=%q, want %q", env["SPEND_STORE"], env["BULK_STORE"], want)
	}
}

// Values sluice could not run with are refused at render time, saying
// what to set.
func TestHelmRefuses(t *testing.T) {
	for _, c := range []struct{ values, says string }{
		{"replicaCount: 3\n", "needs a shared gate"},
		{"replicaCount: 2\nredis: {url: redis://r:6379}\nsettings: {BULK_ENABLED: \"1\"}\n", "SQLite bulk store"},
		{"replicaCount: 2\nredis: {url: redis://r:6379}\nsettings: {SPEND_STORE: sqlite}\n", "SPEND_STORE=sqlite"},
		{"redis: {url: \"redis://:hunter2@r:6379\"}\n", "holds a password"},
		{"redis: {url: redis://r:6379, existingSecret: s}\n", "set one of"},
		{"settings: {ADMIN_KEY: abcdefghijklmnopqrst}\n", "is a secret"},
		{"settings: {SHUTDOWN_DELAY_S: \"9\"}\n", "set by the chart"},
		{"settings: {SPEND_STORE: \"postgres://u:p@db/s\"}\n", "set by the chart"},
		{"replicaCount: 0\n", "replicaCount"},
		{"replicaCount: two\n", "replicaCount"},
	} {
		_, err := render(t, "sluice", c.values)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("values %q: %v, want a refusal saying %q", c.values, err, c.says)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the refusal prints the password: %v", err)
		}
	}
}

// helm lint, through its library, on the default and the team's values:
// no error, and no warning but the undownloaded dependencies.
func TestHelmLint(t *testing.T) {
	for _, values := range []string{"", teamValues} {
		vals := map[string]any{}
		if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
			t.Fatal(err)
		}
		l := lint.RunAll(chartDir, vals, "team")
		for _, msg := range l.Messages {
			switch {
			case msg.Severity == support.WarningSev && strings.Contains(msg.Err.Error(), "missing these dependencies: redis,postgresql"):
			case msg.Severity >= support.WarningSev:
				t.Errorf("helm lint: %v", msg)
			default:
				t.Logf("helm lint: %v", msg)
			}
		}
	}
}
