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
	highMu  sync.Mutex
	highMap map[uintptr]*chunk
	leafMu  sync.Mutex
)

func lookup(p uintptr) *chunk {
	g := p >> chunkShift
	if g >= 1<<(rootBits+leafBits) {
		highMu.Lock()
		defer highMu.Unlock()
		return highMap[g]
	}
	l := root[g>>leafBits].Load()
	if l == nil {
		return nil
	}
	return l[g&(1<<leafBits-1)].Load()
}

// setGranules points every granule of [base, base+n) at c (nil clears).
func setGranules(base, n uintptr, c *chunk) {
	for g := base >> chunkShift; g <= (base+n-1)>>chunkShift; g++ {
		if g >= 1<<(rootBits+leafBits) {
			highMu.Lock()
			if highMap == nil {
				highMap = map[uintptr]*chunk{}
			}
			if c == nil {
				delete(highMap, g)
			} else {
				highMap[g] = c
			}
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
