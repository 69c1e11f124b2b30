package request

import "context"

type callerKey struct{}

// WithCaller returns ctx carrying caller: who sluice authenticated the
// request's client as, when it holds the upstream key itself (inbound
// keys), and the request then carries that one upstream key whoever sent
// it. What a client stores with sluice (bulk requests) is its caller's,
// not the upstream key's.
func WithCaller(ctx context.Context, caller string) context.Context {
	return context.WithValue(ctx, callerKey{}, caller)
}

// CallerOf is ctx's caller (see WithCaller); false when sluice did not
// authenticate the client itself, and its own API key identifies it.
func CallerOf(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(callerKey{}).(string)
	return c, ok && c != ""
}
