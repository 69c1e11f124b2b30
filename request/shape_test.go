package request

import (
	"crypto/hmac"
	"crypto/sha256"
	"testing"
)

// blockBodies are prompts of every shape Shapes and Parse must count
// alike: string and array system prompts and contents, tools with and
// without breakpoints, a role after its content (the Go SDK's order),
// tool calls and results, automatic caching.
var blockBodies = map[string][]byte{
	"small": smallBody(),
	"agent": agentBody(),
	"role after content": []byte(`{"model":"m","max_tokens":5,"system":"be brief","messages":[` +
		`{"content":[{"type":"text","text":"héllo \"there\"","cache_control":{"type":"ephemeral","ttl":"1h"}}],"role":"user"}]}`),
	"automatic": []byte(`{"model":"m","cache_control":{"type":"ephemeral"},"tools":[{"name":"a","input_schema":{}}],` +
		`"messages":[{"role":"user","content":"one"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"a","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"two"}]}]}`),
	"odd values": []byte(`{"model":"m","tools":[1,{"name":"b","cache_control":{"type":"ephemeral"}}],"system":[{"type":"text","text":"s"},"x"],` +
		`"messages":[3,{"role":"user"},{"role":"user","content":[]},{"role":"user","content":"ok"}]}`),
}

// Shapes counts each block's tokens by Parse's rules: the blocks add up to
// Parse's estimate of the whole prompt, and the running total at each
// breakpoint is the prefix Parse keys there.
func TestShapesCountAsParseDoes(t *testing.T) {
	for name, body := range blockBodies {
		d, err := Parse(body, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		total, n := 0, 0
		var breaks []int
		auto := Shapes(body, sha256.New(), func(b *Shape) bool {
			total += b.Tokens
			n++
			if b.CacheControl != nil {
				breaks = append(breaks, total)
			}
			return true
		})
		if auto != nil && (len(breaks) == 0 || breaks[len(breaks)-1] != total) {
			breaks = append(breaks, total)
		}
		if n > 0 && total != d.Cost.InputTokens {
			t.Errorf("%s: blocks add up to %d tokens; Parse estimates %d", name, total, d.Cost.InputTokens)
		}
		if len(breaks) != len(d.Prefixes) {
			t.Fatalf("%s: %d breakpoints; Parse has %d prefixes", name, len(breaks), len(d.Prefixes))
		}
		for i, p := range d.Prefixes {
			if breaks[i] != p.Tokens {
				t.Errorf("%s: breakpoint %d at %d tokens; Parse's prefix has %d", name, i, breaks[i], p.Tokens)
			}
		}
	}
}

// Equal blocks hash equal whatever their cache_control or position, and
// a keyed hash keeps two recordings' sums apart.
func TestShapesHashContentNotPlace(t *testing.T) {
	body := []byte(`{"model":"m","system":[{"type":"text","text":"same"},{"type":"text","text":"same","cache_control":{"type":"ephemeral"}},{"type":"text","text":"other"}],` +
		`"messages":[{"role":"user","content":"same"}]}`)
	sums := func(key string) []string {
		var out []string
		Shapes(body, hmac.New(sha256.New, []byte(key)), func(b *Shape) bool { out = append(out, string(b.Sum)); return true })
		return out
	}
	a, b := sums("one"), sums("two")
	if len(a) != 4 {
		t.Fatalf("%d blocks; want 4", len(a))
	}
	if a[0] != a[1] || a[0] != a[3] {
		t.Error("the same text hashes differently with a breakpoint, or as a string content")
	}
	if a[0] == a[2] {
		t.Error("different texts hash alike")
	}
	if a[0] == b[0] {
		t.Error("two keys give the same sum")
	}
}

// A body Parse refuses yields no blocks.
func TestShapesOfInvalidBody(t *testing.T) {
	for _, body := range []string{``, `[]`, `{"system":"x"`, `{"system":"x"} extra`} {
		n := 0
		Shapes([]byte(body), sha256.New(), func(*Shape) bool { n++; return true })
		if n != 0 {
			t.Errorf("%q: %d blocks; want none", body, n)
		}
	}
}

func BenchmarkShapes(b *testing.B) {
	body := agentBody()
	h := hmac.New(sha256.New, []byte("salt"))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		Shapes(body, h, func(*Shape) bool { return true })
	}
}
