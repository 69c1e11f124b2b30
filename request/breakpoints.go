package request

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"time"
)

// position records the boundary after the block just hashed, a
// breakpoint's when ttl > 0. The block continuing a run of its kind whose
// last block is no breakpoint moves that run's one position here instead.
func (p *prompt) position(ttl time.Duration, run uint8) {
	if run != runNone && p.positions > 0 {
		if last := &p.look[(p.positions-1)%LookbackPositions]; last.run == run && last.ttl == 0 {
			p.positions--
			if p.lastCacheable == p.positions {
				p.lastCacheable = -1
			}
		}
	}
	at := &p.look[p.positions%LookbackPositions]
	st, _ := p.h.(encoding.BinaryAppender).AppendBinary(at.state[:0])
	if len(st) > len(at.state) {
		st = st[:0] // a hash that does not fit: the position keys as empty
	}
	at.n, at.tokens, at.ttl, at.run, at.block = len(st), p.tokens-p.outside, ttl, run, p.blocks-1
	p.positions++
}

// key is the prefix key at the ring's position i.
func (p *prompt) key(i int) uint64 {
	at := &p.look[i%LookbackPositions]
	if p.scratch == nil {
		p.scratch = sha256.New()
	}
	if p.scratch.(encoding.BinaryUnmarshaler).UnmarshalBinary(at.state[:at.n]) != nil {
		return 0
	}
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(p.scratch.Sum(sum[:0]))
}

// automatic applies a top-level cache_control: a breakpoint on the last
// cacheable block, unless that block has its own.
func (p *prompt) automatic(cc []byte) {
	if len(cc) == 0 || cc[0] != '{' || p.lastCacheable < 0 || p.positions-p.lastCacheable > LookbackPositions {
		return
	}
	at := &p.look[p.lastCacheable%LookbackPositions]
	if at.ttl > 0 {
		return // its own breakpoint
	}
	at.ttl = p.ttlOf(cc)
	n := len(p.prefixes)
	p.breakpoint(p.lastCacheable)
	if len(p.prefixes) > n {
		p.placeLast()
	}
	if n := p.lastCacheableBlock; n < len(p.blockList) {
		p.blockList[n].Breakpoint = true
	}
}

// placeLast moves the prefix just added (automatic caching's) to its
// place among the others, which are in the order of the prompt: the last
// cacheable block may come before a block with a breakpoint of its own
// that automatic caching does not count as cacheable (one the fuzzer
// found: a text block whose text is misspelt). A prefix as long as one
// there already is the same prefix, and is dropped.
func (p *prompt) placeLast() {
	last := p.prefixes[len(p.prefixes)-1]
	i := len(p.prefixes) - 1
	for i > 0 && p.prefixes[i-1].Tokens > last.Tokens {
		i--
	}
	if i > 0 && p.prefixes[i-1].Tokens == last.Tokens {
		p.prefixes = p.prefixes[:len(p.prefixes)-1]
		return
	}
	copy(p.prefixes[i+1:], p.prefixes[i:len(p.prefixes)-1])
	p.prefixes[i] = last
}

// breakpoint adds the prefix ending at position i, and the positions of
// its lookback window to the reads.
func (p *prompt) breakpoint(i int) {
	if len(p.prefixes) == MaxPrefixes {
		return
	}
	if p.prefixes == nil {
		p.prefixes = make([]Prefix, 0, MaxPrefixes)
	}
	at := &p.look[i%LookbackPositions]
	bp := Prefix{Key: p.key(i), Tokens: at.tokens, TTL: at.ttl}
	p.prefixes = append(p.prefixes, bp)
	if p.reads == nil {
		p.reads = make([]Prefix, 0, LookbackPositions)
	}
	// Positions still in the ring only: automatic caching's breakpoint
	// may sit a few positions before the last, whose window then reaches
	// past what the ring keeps (those few positions are not read).
	for j := max(i-LookbackPositions+1, p.readTo+1, p.positions-LookbackPositions, 0); j < i; j++ {
		w := &p.look[j%LookbackPositions]
		p.reads = append(p.reads, Prefix{Key: p.key(j), Tokens: w.tokens, TTL: w.ttl})
		p.reachable(w.block)
	}
	if i > p.readTo {
		p.reads = append(p.reads, bp)
		p.readTo = i
		p.reachable(at.block)
	}
}

// reachable marks block b of the block list as one a read may end after.
func (p *prompt) reachable(b int) {
	if b >= 0 && b < len(p.blockList) {
		p.blockList[b].Lookback = true
	}
}

// ttlOf is the lifetime a cache_control object asks for: an hour for
// "ttl":"1h", else the default five minutes.
func (p *prompt) ttlOf(cc []byte) time.Duration {
	ttl := 5 * time.Minute
	var seen uint16
	object(cc, 0, 0, func(k, kEnd, v int) int {
		f := p.check(cacheFields, cc[k:kEnd], &seen)
		if f == -2 {
			return -1
		}
		end := skipValue(cc, v, 1)
		if f == 0 && string(cc[v:end]) == `"1h"` {
			ttl = time.Hour
		}
		return end
	})
	return ttl
}
