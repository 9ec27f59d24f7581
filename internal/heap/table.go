package heap

import (
	"sync"
	"sync/atomic"
)

// The chunk table maps every 4 MiB granule of the address space that the
// runtime owns to its chunk, so that free can tell our pointers from foreign
// ones in O(1) without touching the memory behind them. It is a two-level
// radix over 48-bit addresses (13 + 13 bits above the 22-bit granule), read
// without locks; addresses above 2^48 (rare 52-bit VA setups) go to a map.
const (
	chunkShift = 22
	chunkSize  = 1 << chunkShift
	leafBits   = 13
	rootBits   = 48 - chunkShift - leafBits
)

type leaf [1 << leafBits]atomic.Pointer[chunk]

var (
	root    [1 << rootBits]atomic.Pointer[leaf]
	highMu  sync.Mutex                         // serialises writers of highMap
	highMap atomic.Pointer[map[uintptr]*chunk] // copied on write: read without a lock (Free reads it pinned)
	leafMu  sync.Mutex
)

// lookup returns the chunk holding p, or nil.
func lookup(p uintptr) *chunk {
	if ch := lookupLow(p); ch != nil {
		return ch
	}
	return lookupHigh(p)
}

// lookupLow is lookup for the addresses the two-level table covers (48
// bits: all of amd64's user space), nil for any other. Small enough to
// inline into Free, which asks lookupHigh only when it returns nil.
func lookupLow(p uintptr) *chunk {
	if g := p >> chunkShift; g < 1<<(rootBits+leafBits) {
		if l := root[g>>leafBits].Load(); l != nil {
			return within(l[g&(1<<leafBits-1)].Load(), p)
		}
	}
	return nil
}

// lookupHigh finds the chunk holding p when p is above the table's reach.
func lookupHigh(p uintptr) *chunk {
	g := p >> chunkShift
	if g < 1<<(rootBits+leafBits) {
		return nil
	}
	if m := highMap.Load(); m != nil {
		return within((*m)[g], p)
	}
	return nil
}

// within returns ch if p lies in it. A huge region's last granule is
// often only partly its own (a 2.1 MiB region leaves 1.9 MiB of its
// granule to whatever the kernel maps there next: another library's
// memory, a target block); the table points the whole granule at it, so
// an address past its end is not the heap's.
func within(ch *chunk, p uintptr) *chunk {
	if ch != nil && p-ch.base < ch.size {
		return ch
	}
	return nil
}

// setGranules points every granule of [base, base+n) at c (nil clears).
func setGranules(base, n uintptr, c *chunk) {
	for g := base >> chunkShift; g <= (base+n-1)>>chunkShift; g++ {
		if g >= 1<<(rootBits+leafBits) {
			highMu.Lock()
			m := map[uintptr]*chunk{}
			if old := highMap.Load(); old != nil {
				for k, v := range *old {
					m[k] = v
				}
			}
			if c == nil {
				delete(m, g)
			} else {
				m[g] = c
			}
			highMap.Store(&m)
			highMu.Unlock()
			continue
		}
		r := &root[g>>leafBits]
		l := r.Load()
		if l == nil {
			leafMu.Lock()
			if l = r.Load(); l == nil {
				l = new(leaf)
				r.Store(l)
			}
			leafMu.Unlock()
		}
		l[g&(1<<leafBits-1)].Store(c)
	}
}
