package pace

import (
	"net/http"
	"time"
)

// What a request costs each of a key's buckets, and the debit taken for it.

// Kind is one of the API's limits.
type Kind int

const (
	Requests     Kind = iota // anthropic-ratelimit-requests-*
	InputTokens              // anthropic-ratelimit-input-tokens-*: uncached input and cache writes
	OutputTokens             // anthropic-ratelimit-output-tokens-*
	Tokens                   // anthropic-ratelimit-tokens-*: the tighter of the two; used only when neither is reported
	numKinds
)

var kindNames = [numKinds]string{"requests", "input-tokens", "output-tokens", "tokens"}

// String is the limit's name as the headers spell it.
func (k Kind) String() string { return kindNames[k] }

// Cost is what one request is estimated to spend of each limit.
type Cost struct {
	Input float64 // uncached input tokens and cache writes: cache reads do not count
	// Output is max_tokens until the answer has ended, as the API counts
	// it: its rate-limits documentation says the output-token limit is
	// estimated from max_tokens at the start of each request and adjusted
	// to the tokens used at its end.
	Output float64
}

// of is c's amount of kind k (one request of Requests).
func (c Cost) of(k Kind) float64 {
	switch k {
	case Requests:
		return 1
	case InputTokens:
		return c.Input
	case OutputTokens:
		return c.Output
	}
	return c.Input + c.Output
}

// Debit is what Take took from one key's buckets, to be given back or
// corrected later.
type Debit struct {
	Key  string
	Cost Cost
	// spent is the key's running total of debits, by kind, when this one
	// was taken: what was debited after it is what its answer's headers
	// cannot have seen yet.
	spent [numKinds]float64
	// given is the key's running total of what was given back, by kind,
	// when this one was taken, and at when it was taken: what was given
	// back since, and what refilled since, its answer's headers may not
	// have seen either (they were made when the upstream admitted it).
	given  [numKinds]float64
	at     time.Time
	taken  bool
	shared bool
}

// Taken reports whether d holds a debit.
func (d Debit) Taken() bool { return d.taken }

// NumKinds is how many limits there are.
const NumKinds = int(numKinds)

// SharedDebit is a debit of c from key taken by a store other than
// Buckets (one that replicas share), spent and given being the key's
// running totals of debits and of what was given back, by kind, before
// it, and at the store's clock when it was taken: the bounds an answer's
// headers set are reckoned from them, as Observe's are.
func SharedDebit(key string, c Cost, spent, given [NumKinds]float64, at time.Time) Debit {
	return Debit{Key: key, Cost: c, spent: spent, given: given, at: at, taken: true, shared: true}
}

// Shared reports whether d was made by SharedDebit.
func (d Debit) Shared() bool { return d.shared }

// Spent is the key's running totals of debits, by kind, when d was taken.
func (d Debit) Spent() [NumKinds]float64 { return d.spent }

// Given is the key's running totals of what was given back, by kind, when
// d was taken.
func (d Debit) Given() [NumKinds]float64 { return d.given }

// At is when d was taken, by the clock of the store that took it.
func (d Debit) At() time.Time { return d.at }

// Uncounted is how much of kind the upstream did not count of d's request
// when it answered status: a refusal's headers have not seen its debit,
// which is given back after them.
func (d Debit) Uncounted(kind Kind, status int) float64 {
	if status == http.StatusTooManyRequests || (status >= 300 && kind != Requests) {
		return d.Cost.of(kind)
	}
	return 0
}

// Of is c's amount of kind k (1 of Requests).
func (c Cost) Of(k Kind) float64 { return c.of(k) }
