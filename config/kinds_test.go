package config

import "testing"

// Each kind sluice knows is described once, and only anthropic serves the
// first-party paths; an unknown kind is no kind and serves nothing.
func TestKindsDescribeWhatEachServes(t *testing.T) {
	for name, first := range map[string]bool{"anthropic": true, "bedrock": false, "vertex": false, "foundry": false} {
		k, ok := KindOf(name)
		if !ok || k.Name != name || k.FirstParty != first || k.check == nil {
			t.Errorf("KindOf(%q) = %+v, %v; want it described, first-party %v", name, k, ok, first)
		}
		if (Backend{Kind: name}).FirstParty() != first {
			t.Errorf("a %s backend: FirstParty() != %v", name, first)
		}
	}
	if k, ok := KindOf("openai"); ok || k.FirstParty || (Backend{Kind: "openai"}).FirstParty() {
		t.Errorf("KindOf(openai) = %+v, %v; want no kind", k, ok)
	}
	if got, want := kindNames(), "anthropic, bedrock, vertex or foundry"; got != want {
		t.Errorf("kindNames() = %q; want %q", got, want)
	}
}
