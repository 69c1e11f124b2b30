package deploy

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestPrometheusRulesPassPromtool(t *testing.T) {
	promtool := tool(t, "promtool", "apt-get install prometheus")
	for _, args := range [][]string{
		{"check", "rules", "sluice-rules.yml"},
		// The unit tests fire alerts from made-up series and compare labels
		// and annotations, so a broken template or threshold shows here.
		{"test", "rules", "sluice-rules_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// rule is the part of a Prometheus alerting rule the tests read.
type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile("prometheus/sluice-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("sluice-rules.yml: %v", err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

func TestEveryAlertHasForSeverityAndWhatToDo(t *testing.T) {
	rs := readRules(t)
	if len(rs) < 6 {
		t.Fatalf("read %d rules, want the 6 of sluice-rules.yml", len(rs))
	}
	for _, r := range rs {
		if r.Expr == "" {
			t.Errorf("%s: no expr", r.Alert)
		}
		if r.For == "" {
			t.Errorf("%s: no for:, so one bad scrape pages someone", r.Alert)
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || len(r.Annotations["description"]) < 80 {
			t.Errorf("%s: needs a summary and a description that says what to do", r.Alert)
		}
	}
}
