package sim

import (
	"testing"

	"github.com/sluicehq/sluice/price"
)

// Every model the simulator serves has a row of its own in the price
// table its cost counter (and sluice's spend) is priced by.
func TestEveryModelPriced(t *testing.T) {
	for _, m := range models {
		if e, b := price.Default().Lookup(m.ID); b != price.Listed {
			t.Errorf("%s: priced %s (%s)", m.ID, b, e.Model)
		}
	}
}
