package tenants

import (
	"math"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
)

// A client's max_tokens was any non-negative int (request.countOf): the
// largest one made the ticket's cost, input plus max_tokens, wrap to a
// negative number, which the fair order counts as 1, the cheapest request
// there is, instead of the dearest. Counts are now capped at 2^31.
func TestHugeMaxTokensDoesNotMakeTheCheapestTicket(t *testing.T) {
	d, err := request.Parse([]byte(`{"model":"m","max_tokens":9223372036854775807,"messages":[{"role":"user","content":"hello there"}]}`), http.Header{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Cost.MaxTokens <= 0 || d.Cost.MaxTokens >= math.MaxInt64/2 {
		t.Fatalf("max_tokens read as %d; want a large count that cannot overflow a sum", d.Cost.MaxTokens)
	}
	ts := New(Config{})
	tn, _ := ts.Enter(&d)
	var tk gate.Ticket
	ts.Ticket(&tk, tn, &d)
	if tk.Cost < int64(d.Cost.InputTokens) {
		t.Errorf("ticket cost %d for max_tokens %d: it wrapped below the input's %d tokens", tk.Cost, d.Cost.MaxTokens, d.Cost.InputTokens)
	}
}
