package route

import (
	"strconv"
	"strings"
	"time"
)

// Sharing what the pool learns with the other replicas of a fleet (under
// GATE_BACKEND=redis): which keys hold which prompt prefixes, and which
// keys are skipped after failures. (The keys' buckets are shared as the
// pacing's are, by their store.) Each replica tells the others what it
// learns, as it learns it, and applies what they tell; nothing on the
// request path waits for the telling, and a replica that hears nothing
// (the store is down) routes on what it knows itself, as a lone sluice
// does. The replicas must declare the same backends in the same order:
// keys are told by name.

// Share carries the pool's news between replicas. Publish must not
// block: it may drop a message it cannot send soon.
type Share interface {
	Publish(msg string)
	Listen(f func(msg string))
}

// ShareWith makes p tell s what it learns, and apply what s hears from
// the other replicas. Call it once, before p routes.
func (p *Pool) ShareWith(s Share) {
	p.share = s
	s.Listen(p.heard)
}

// tellWrote tells the other replicas that k holds ps.
func (p *Pool) tellWrote(k *Key, ps []prefixTTL) {
	if p.share == nil || len(ps) == 0 {
		return
	}
	var b strings.Builder
	b.WriteString("a ")
	b.WriteString(k.Name)
	for _, x := range ps {
		b.WriteByte(' ')
		b.WriteString(strconv.FormatUint(x.key, 16))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(x.until.UnixMilli(), 10))
	}
	p.share.Publish(b.String())
}

// tellHealth tells the other replicas that k is skipped until until,
// after fails failures in a row (zero: healthy again).
func (p *Pool) tellHealth(k *Key, fails int, until time.Time) {
	if p.share == nil {
		return
	}
	ms := int64(0)
	if !until.IsZero() {
		ms = until.UnixMilli()
	}
	p.share.Publish("h " + k.Name + " " + strconv.Itoa(fails) + " " + strconv.FormatInt(ms, 10))
}

// heard applies a message of another replica's; one it cannot read (a
// replica of another version, a key this one does not declare) is
// dropped.
func (p *Pool) heard(msg string) {
	f := strings.Fields(msg)
	if len(f) < 2 {
		return
	}
	k := p.keyNamed(f[1])
	if k == nil {
		return
	}
	switch f[0] {
	case "a":
		ps := make([]prefixTTL, 0, len(f)-2)
		for _, x := range f[2:] {
			key, until, ok := strings.Cut(x, ":")
			pk, err1 := strconv.ParseUint(key, 16, 64)
			ms, err2 := strconv.ParseInt(until, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				return
			}
			ps = append(ps, prefixTTL{pk, time.UnixMilli(ms)})
		}
		p.affinity.hold(ps, k)
	case "h":
		if len(f) != 4 {
			return
		}
		fails, err1 := strconv.Atoi(f[2])
		ms, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || fails < 0 {
			return
		}
		var until time.Time
		if ms > 0 {
			until = time.UnixMilli(ms)
		}
		k.health.set(fails, until)
	}
}

func (p *Pool) keyNamed(name string) *Key {
	for _, k := range p.Keys {
		if k.Name == name {
			return k
		}
	}
	return nil
}
