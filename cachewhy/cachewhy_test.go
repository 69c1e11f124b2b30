package cachewhy

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/request"
)

// agent is a Claude Code-shaped body: tools without a breakpoint, then
// system = [an attribution line (no breakpoint), an identity line and a
// main prompt (breakpoints)], then the session's turns, the last with a
// breakpoint. order lists the tools in the order sent.
func agent(attribution string, order []int, turns ...string) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":128000,"stream":true,"tools":[`)
	for i, t := range order {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"tool_%d","description":%q}`, t, strings.Repeat(fmt.Sprintf("tool %d does one thing well. ", t), 90))
	}
	fmt.Fprintf(&b, `],"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332.%s; cc_entrypoint=sdk-cli;"},`, attribution)
	b.WriteString(`{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}},`)
	fmt.Fprintf(&b, `{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],"messages":[`, strings.Repeat("Read before you edit. ", 300))
	for i, t := range turns {
		if i > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		cc := ""
		if i == len(turns)-1 {
			cc = `,"cache_control":{"type":"ephemeral"}`
		}
		fmt.Fprintf(&b, `{"role":%q,"content":[{"type":"text","text":%q%s}]}`, role, t, cc)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

var twelve = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}

func blocks(t *testing.T, body []byte) []request.Block {
	t.Helper()
	_, bs, err := request.ParseBlocks(body, nil)
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

func explain(t *testing.T, x *Index, body []byte) (Finding, []request.Block) {
	t.Helper()
	bs := blocks(t, body)
	return x.Explain(bs), bs
}

// A fleet of agents whose attribution lines and tasks differ: the line is
// in no prefix, as the API caches (request.AttributionPrefix), so each
// write after the first is put down to messages[0], the task, with the
// tools and the system prompt as what it could have read. An agent whose
// identity line differs is put down to system[1], with the tools' tokens.
func TestExplainFleet(t *testing.T) {
	var x Index
	if f, _ := explain(t, &x, agent("a1f", twelve, "fix the test")); f.Block != New || f.Shared != 0 {
		t.Errorf("the first agent: %+v; want new, nothing shared", f)
	}
	for i, attr := range []string{"b27", "c03", "d9e"} {
		f, bs := explain(t, &x, agent(attr, twelve, fmt.Sprintf("task %d", i)))
		if f.Block != "messages[0]" || f.Label != "messages[0]" {
			t.Errorf("agent %s: %+v; want messages[0]", attr, f)
		}
		if system := bs[14].Tokens; f.Shared != system || bs[11].Tokens < 7000 || system <= bs[11].Tokens {
			t.Errorf("agent %s: shared %d tokens; want the tools' and system prompt's %d", attr, f.Shared, system)
		}
	}
	other := bytes.Replace(agent("e55", twelve, "task 9"), []byte("You are Claude Code."), []byte("You are a reviewer."), 1)
	f, bs := explain(t, &x, other)
	if f.Block != "system[1]" || f.Shared != bs[12].Tokens {
		t.Errorf("another identity line: %+v; want system[1], sharing the tools and the attribution line's %d tokens", f, bs[12].Tokens)
	}
	// What an answer read is not what the block cost.
	if f := (Finding{Shared: 7800}); f.Unread(0) != 7800 || f.Unread(1000) != 6800 || f.Unread(9000) != 0 {
		t.Errorf("Unread: %d, %d, %d; want 7800, 6800, 0", f.Unread(0), f.Unread(1000), f.Unread(9000))
	}
}

// A session's next turn begins with the prefix its last turn cached: the
// write is of what was appended. The same prompt again is the same
// prefix. A tool list in another order differs at the first tool moved;
// past index 7 the label stands for the rest of the section.
func TestExplainTurnsAndOrder(t *testing.T) {
	var x Index
	explain(t, &x, agent("a1f", twelve, "fix the test"))
	f, bs := explain(t, &x, agent("a1f", twelve, "fix the test", "I read the file.", "go on"))
	if f.Block != Appended || f.Shared != bs[15].Tokens {
		t.Errorf("the next turn: %+v; want appended, sharing the first turn's %d tokens", f, bs[15].Tokens)
	}
	f, bs = explain(t, &x, agent("a1f", twelve, "fix the test", "I read the file.", "go on"))
	if f.Block != Same || f.Shared != bs[len(bs)-1].Tokens {
		t.Errorf("the same prompt again: %+v; want same, sharing all %d tokens", f, bs[len(bs)-1].Tokens)
	}
	swapped := []int{0, 1, 2, 4, 3, 5, 6, 7, 8, 9, 10, 11}
	if f, bs = explain(t, &x, agent("a1f", swapped, "fix the test")); f.Block != "tools[3]" || f.Label != "tools[3]" || f.Shared != bs[2].Tokens {
		t.Errorf("tools 3 and 4 swapped: %+v; want tools[3], sharing tools[0..2]'s %d tokens", f, bs[2].Tokens)
	}
	late := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 9, 11}
	if f, _ = explain(t, &x, agent("a1f", late, "fix the test")); f.Block != "tools[9]" || f.Label != "tools[>=8]" {
		t.Errorf("tools 9 and 10 swapped: %+v; want tools[9], labelled tools[>=8]", f)
	}
	// A prompt without a breakpoint writes nothing: nothing to explain.
	if f := x.Explain(blocks(t, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))); f.Block != "" || f.Label != "" {
		t.Errorf("no breakpoint: %+v; want nothing", f)
	}
}

// A turn that adds more block boundaries than the API's lookback window
// holds (20, counting its breakpoint) past the last turn's breakpoint
// does not read that turn's prefix: the write is put down to
// beyond-lookback, not appended, and what could have been read is the
// last turn's prefix. Before the lookback was modelled it was appended.
func TestExplainBeyondLookback(t *testing.T) {
	var x Index
	explain(t, &x, agent("a1f", twelve, "fix the test"))
	turns := []string{"fix the test"}
	for i := range 20 {
		turns = append(turns, fmt.Sprintf("step %d", i))
	}
	f, bs := explain(t, &x, agent("a1f", twelve, turns...))
	if f.Block != BeyondLookback || f.Label != BeyondLookback || f.Shared != bs[15].Tokens {
		t.Errorf("20 messages later: %+v; want beyond-lookback, sharing the first turn's %d tokens", f, bs[15].Tokens)
	}
	if f, _ := explain(t, &x, agent("a1f", twelve, append(turns, "one more", "and done")...)); f.Block != Appended {
		t.Errorf("2 messages after that: %+v; want appended", f)
	}
}

// The index holds at most MaxNodes runs, and what it dropped is the least
// recently seen: the prompt seen last is still found.
func TestExplainBounded(t *testing.T) {
	x := Index{MaxNodes: 100}
	for i := range 50 {
		explain(t, &x, agent(fmt.Sprintf("%03x", i), []int{i}, "task"))
	}
	if n := x.Len(); n > 100 {
		t.Errorf("%d runs kept; want at most 100", n)
	}
	if f, _ := explain(t, &x, agent("031", []int{49}, "task")); f.Block != Same {
		t.Errorf("the last prompt again: %+v; want same", f)
	}
	if f, _ := explain(t, &x, agent("000", []int{0}, "task")); f.Block != New {
		t.Errorf("a prompt dropped long ago: %+v; want new", f)
	}
}

// Stats add up by label, the most unread tokens first.
func TestStats(t *testing.T) {
	var x Index
	x.Wrote(Finding{Block: "system[0]", Label: "system[0]"}, 7800)
	x.Wrote(Finding{Block: "system[0]", Label: "system[0]"}, 7700)
	x.Wrote(Finding{Block: "messages[9]", Label: "messages[>=8]"}, 100)
	x.Wrote(Finding{Block: New, Label: New}, 0)
	x.Wrote(Finding{}, 50) // nothing to explain: not counted
	got := fmt.Sprint(x.Stats())
	if want := "[{system[0] 2 15500} {messages[>=8] 1 100} {new 1 0}]"; got != want {
		t.Errorf("stats %s; want %s", got, want)
	}
}
