package sse

import "sync"

// BytePool keeps byte buffers of one size for reuse. sync.Pool holds
// pointers: a slice put in it as it is would be boxed, an allocation for
// each put, so each buffer travels in a holder, and the holders of the
// buffers taken out wait in a pool of their own until the buffers come
// back. (A pool of holders that gave back empty holders, and put a
// buffer back only into an empty one, lost buffers and allocated anew
// for every stream: docs/streams.md.)
type BytePool struct {
	Size    int       // of each buffer
	full    sync.Pool // *[]byte holding a buffer of cap size
	holders sync.Pool // *[]byte holding nothing
}

// get returns an empty buffer of capacity p.Size.
func (p *BytePool) Get() []byte {
	h, _ := p.full.Get().(*[]byte)
	if h == nil {
		return make([]byte, 0, p.Size)
	}
	b := *h
	*h = nil
	p.holders.Put(h)
	return b[:0]
}

// put gives b back, unless it is not of the pool's size (grown for a long
// event, say).
func (p *BytePool) Put(b []byte) {
	if cap(b) != p.Size {
		return
	}
	h, _ := p.holders.Get().(*[]byte)
	if h == nil {
		h = new([]byte)
	}
	*h = b[:0]
	p.full.Put(h)
}
