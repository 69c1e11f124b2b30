package gate

// Limit says how many slots a gate may have held at once. It may change
// over time (an adaptive limit, a limit shared with other processes); a
// gate reads it at every Join and Release and never grants past it. A
// limit that falls takes slots back only as their holders release them.
type Limit interface {
	// Slots is the number of slots now. It is called under the gate's
	// lock, so it must be quick and must not block.
	Slots() int
}

// Learner is an optional interface of a Limit that learns from how each
// slot's use went. The gate calls Observe under its lock at every Release,
// before it hands the slot on, with the Outcome's InFlight set to the
// slots held then (the released one included), and then grants as many
// waiting tickets as the limit allows.
type Learner interface {
	Observe(o Outcome)
}

// Raiser is an optional interface of a Limit whose Slots can rise on its
// own, between releases (a limit leased from elsewhere): the gate calls
// OnRaise once, when it is built, and the limit calls raised whenever its
// Slots may have risen; the gate then grants waiting tickets up to it.
// raised takes the gate's lock: never call it from Slots or Observe.
type Raiser interface {
	OnRaise(raised func())
}

// Fixed is a limit that never changes.
type Fixed int

var _ Limit = Fixed(0)

// Slots returns the fixed number.
func (f Fixed) Slots() int { return int(f) }
