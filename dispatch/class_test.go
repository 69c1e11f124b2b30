package dispatch

import (
	"testing"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
)

// A request's class and the gate's are two types of the same values (the
// scheduler converts one into the other when it fills a ticket): each
// request class is the gate class of its name, and both have two.
func TestClassesAreTheGates(t *testing.T) {
	for _, name := range []string{"interactive", "batch"} {
		rc, err := request.ParseClass(name)
		if err != nil {
			t.Fatal(err)
		}
		gc, err := gate.ParseClass(name)
		if err != nil {
			t.Fatal(err)
		}
		if gate.Class(rc) != gc {
			t.Errorf("%s: request.Class %d is gate.Class %v; want %v", name, rc, gate.Class(rc), gc)
		}
	}
	if _, err := request.ParseClass("background"); err == nil || gate.Class(2).String() == "background" {
		t.Error("a third class in one and not the other")
	}
}
