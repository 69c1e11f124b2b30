package proxy

import (
	"context"
	"testing"
)

// Abort cuts, with errShuttingDown, exactly the requests begun and not
// yet ended, whichever place in the list each had, and any begun after
// it; a request that ended is left alone, and Idle's count follows.
func TestAbortCutsTheRequestsBeingServed(t *testing.T) {
	p := &Proxy{}
	var f [4]inFlight
	ctx := make([]context.Context, len(f))
	for i := range f {
		ctx[i] = p.begin(context.Background(), &f[i])
	}
	p.end(&f[3]) // the head of the list
	p.end(&f[1]) // the middle
	p.end(&f[0]) // the tail
	if err := ctx[1].Err(); err == nil || context.Cause(ctx[1]) == errShuttingDown {
		t.Errorf("an ended request: %v, cause %v; want cancelled by its end, not by Abort", err, context.Cause(ctx[1]))
	}
	if n := p.active.Load(); n != 1 {
		t.Fatalf("%d active; want 1", n)
	}
	if ctx[2].Err() != nil {
		t.Fatal("a request being served was cut before Abort")
	}
	p.Abort()
	if context.Cause(ctx[2]) != errShuttingDown {
		t.Errorf("the request being served: cause %v; want errShuttingDown", context.Cause(ctx[2]))
	}
	if context.Cause(ctx[0]) == errShuttingDown || context.Cause(ctx[3]) == errShuttingDown {
		t.Error("Abort reached a request that had ended")
	}
	var late inFlight
	if c := p.begin(context.Background(), &late); context.Cause(c) != errShuttingDown {
		t.Errorf("a request begun after Abort: cause %v; want errShuttingDown at once", context.Cause(c))
	}
	p.end(&late)
	p.end(&f[2])
	if n := p.active.Load(); n != 0 || p.serving.head != nil {
		t.Errorf("%d active, list head %p after every end; want none", n, p.serving.head)
	}
}
