package reliability

import (
	"errors"
	"math"
	"math/bits"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// The allocators the fuzz target drives, made once per process: a plain
// one (default_mem_fb), one aligned to 64 (null_fb), and a pooled null_fb
// one whose quota the model tracks byte for byte.
const (
	fuzzPool     = 256 << 10
	fuzzMaxAlloc = 1 << 46 // the heap refuses larger sizes and alignments
	fuzzMaxLive  = 48
)

var (
	fuzzOnce    sync.Once
	fuzzAllocs  [3]*alloc.Allocator
	fuzzAlign   [3]uintptr
	fuzzForeign uintptr // C memory the runtime never returned
)

func fuzzSetup(t testing.TB) {
	fuzzOnce.Do(func() {
		mk := func(opts ...alloc.Option) *alloc.Allocator {
			a, err := alloc.New(memspace.Default, opts...)
			if err != nil {
				panic(err)
			}
			return a
		}
		fuzzAllocs[0] = mk(alloc.WithFallback(traits.DefaultMemFb))
		fuzzAllocs[1] = mk(alloc.WithAlignment(64), alloc.WithFallback(traits.NullFb))
		fuzzAllocs[2] = mk(alloc.WithPoolSize(fuzzPool), alloc.WithFallback(traits.NullFb))
		fuzzAlign = [3]uintptr{16, 64, 16}
		c, err := dl.C()
		if err != nil {
			panic(err)
		}
		if fuzzForeign, err = c.Map(1 << 16); err != nil {
			panic(err)
		}
	})
}

// fuzzBlock is the model of one live block.
type fuzzBlock struct {
	p    unsafe.Pointer
	size uintptr
	a    int // index in fuzzAllocs
	seed byte
	foot uintptr // footprint charged to the pool (allocator 2 only)
}

type fuzzModel struct {
	t        *testing.T
	live     []fuzzBlock
	poolUsed uintptr
	seed     byte
	data     []byte
}

func (m *fuzzModel) byte() byte {
	if len(m.data) == 0 {
		return 0
	}
	b := m.data[0]
	m.data = m.data[1:]
	return b
}

// size decodes a request size: mostly small, some medium, a few large,
// and the sizes no machine can back.
func (m *fuzzModel) size() uintptr {
	c, v := m.byte(), uintptr(m.byte())
	switch c % 8 {
	case 0:
		return 0
	case 1, 2:
		return v + 1
	case 3:
		return v*16 + uintptr(m.byte())
	case 4:
		return v*128 + 1
	case 5:
		return v<<10 + uintptr(m.byte()) // up to 256 KiB
	case 6:
		return (v%4)<<20 + v<<8 // around 1-3 MiB
	}
	return []uintptr{1 << 62, math.MaxUint64, fuzzMaxAlloc + 1, 1 << 47}[v%4]
}

var fuzzAlignments = []uintptr{0, 1, 2, 3, 8, 16, 24, 32, 64, 128, 4096, 1 << 16, 1 << 21, 1 << 50}

// fits says whether allocator i can serve size bytes aligned to al (the
// allocator's own alignment already applied) given the model's pool use.
func (m *fuzzModel) fits(i int, size, al uintptr) (ok bool, foot uintptr) {
	if size > fuzzMaxAlloc || al > fuzzMaxAlloc {
		return false, 0
	}
	if i != 2 {
		return true, 0
	}
	foot = heap.Footprint(size, al)
	return m.poolUsed+foot <= fuzzPool, foot
}

func (m *fuzzModel) add(p unsafe.Pointer, size uintptr, i int, foot uintptr, zeroed bool) {
	t := m.t
	require.NotNil(t, p)
	b := bytesAt(p, size)
	if zeroed {
		step := 1
		if size > sparseOver {
			step = 61 // a prime stride: every page, at varying offsets
		}
		for j := 0; j < len(b); j += step {
			if b[j] != 0 {
				t.Fatalf("calloc block %p not zeroed at %d", p, j)
			}
		}
	}
	m.seed++
	markBlock(b, m.seed)
	m.live = append(m.live, fuzzBlock{p: p, size: size, a: i, seed: m.seed, foot: foot})
	if i == 2 {
		m.poolUsed += foot
	}
}

func (m *fuzzModel) remove(k int) fuzzBlock {
	b := m.live[k]
	m.live[k] = m.live[len(m.live)-1]
	m.live = m.live[:len(m.live)-1]
	if b.a == 2 {
		m.poolUsed -= b.foot
	}
	return b
}

// Blocks over 64 KiB get the pattern in their first and last 4 KiB and in
// one byte of every 4 KiB page between: filling megabytes per operation
// would slow the fuzzer down a hundredfold.
const sparseOver = 64 << 10

func markBlock(b []byte, seed byte) {
	if len(b) <= sparseOver {
		pattern(b, seed)
		return
	}
	pattern(b[:4096], seed)
	for i := 4096; i < len(b)-4096; i += 4096 {
		b[i] = byte(i*131>>3) ^ seed
	}
	n := len(b)
	for i := n - 4096; i < n; i++ {
		b[i] = byte(i*131>>3) ^ seed
	}
}

func blockHolds(b []byte, seed byte) bool {
	if len(b) <= sparseOver {
		return holds(b, seed)
	}
	if !holds(b[:4096], seed) {
		return false
	}
	for i := 4096; i < len(b)-4096; i += 4096 {
		if b[i] != byte(i*131>>3)^seed {
			return false
		}
	}
	for i := len(b) - 4096; i < len(b); i++ {
		if b[i] != byte(i*131>>3)^seed {
			return false
		}
	}
	return true
}

// verify checks a block's pattern: its ends always, all of it when full.
func (m *fuzzModel) verify(b fuzzBlock, full bool) {
	data := bytesAt(b.p, b.size)
	if full || b.size <= 256 {
		require.True(m.t, blockHolds(data, b.seed), "block %p (%d bytes) was changed", b.p, b.size)
		return
	}
	var ref [64]byte
	pattern(ref[:], b.seed)
	require.Equal(m.t, ref[:64], data[:64], "start of block %p", b.p)
	var want [64]byte
	for j := range want {
		k := int(b.size) - 64 + j
		want[j] = byte(k*131>>3) ^ b.seed
	}
	require.Equal(m.t, want[:], data[b.size-64:], "end of block %p", b.p)
}

func (m *fuzzModel) checkCounts() {
	var n [3]int64
	for _, b := range m.live {
		n[b.a]++
	}
	for i, a := range fuzzAllocs {
		require.Equal(m.t, n[i], a.Stats().BlocksLive, "allocator %d live blocks", i)
	}
	require.Equal(m.t, int64(m.poolUsed), fuzzAllocs[2].Stats().PoolUsed, "pool accounting")
	for _, b := range m.live {
		m.verify(b, false)
	}
}

func requireNoBlock(t *testing.T, p unsafe.Pointer, err error, want ...error) {
	t.Helper()
	require.Nil(t, p)
	require.Error(t, err)
	for _, w := range want {
		if errors.Is(err, w) {
			return
		}
	}
	if len(want) > 0 {
		t.Fatalf("error %v is none of %v", err, want)
	}
}

// FuzzAllocatorOps decodes sequences of allocator operations (alloc,
// calloc, aligned alloc, realloc, free, free through the wrong allocator,
// double free, foreign and interior frees) on three allocators and checks
// each against a reference model: live blocks with their sizes and byte
// patterns, alignment, per-allocator live counts, and the pooled
// allocator's quota, which must refuse an allocation exactly when the
// model's footprint says it has no room.
func FuzzAllocatorOps(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{0, 0, 1, 10, 4, 0},
		{0, 2, 5, 200, 7, 0, 2, 5, 200, 7, 0, 2, 5, 200, 7, 0, 2, 5, 200, 7, 4, 0, 4, 0, 4, 0, 4, 0},
		{1, 0, 3, 4, 9, 1, 2, 255, 255, 255},
		{2, 1, 8, 3, 20, 2, 2, 3, 3, 20, 2, 0, 12, 7, 3},
		{0, 0, 2, 100, 3, 0, 3, 100, 1, 3, 0, 0, 0, 0, 5, 0, 6, 0, 7, 1, 7, 0, 8},
		{0, 2, 6, 3, 1, 0, 2, 6, 3, 1, 0, 2, 6, 3, 1},
		{0, 1, 7, 0, 0, 2, 7, 1, 1, 0, 7, 2, 0, 0, 7, 3},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzSetup(t)
		if len(data) > 4096 {
			data = data[:4096]
		}
		m := &fuzzModel{t: t, data: data}
		m.checkCounts()
		for len(m.data) > 0 {
			op := m.byte() % 9
			if len(m.live) >= fuzzMaxLive && op <= 2 {
				op = 4
			}
			m.step(op)
			m.checkCounts()
		}
		for len(m.live) > 0 {
			b := m.remove(len(m.live) - 1)
			m.verify(b, true)
			require.NoError(t, alloc.Free(b.p))
		}
		m.checkCounts()
	})
}

func (m *fuzzModel) pick() (int, bool) {
	if len(m.live) == 0 {
		return 0, false
	}
	return int(m.byte()) % len(m.live), true
}

func (m *fuzzModel) step(op byte) {
	t := m.t
	switch op {
	case 0: // alloc
		i := int(m.byte() % 3)
		size := m.size()
		p, err := fuzzAllocs[i].Alloc(size)
		if size == 0 {
			require.Nil(t, p)
			require.NoError(t, err)
			return
		}
		ok, foot := m.fits(i, size, fuzzAlign[i])
		if !ok {
			requireNoBlock(t, p, err, alloc.ErrPoolExhausted, heap.ErrTooLarge)
			return
		}
		require.NoError(t, err, "alloc %d on %d", size, i)
		require.Zero(t, uintptr(p)%fuzzAlign[i], "alignment")
		m.add(p, size, i, foot, false)

	case 1: // calloc
		i := int(m.byte() % 3)
		n, elem := uintptr(m.byte())*uintptr(m.byte()), m.size()
		if m.byte()%8 == 0 {
			n = math.MaxUint64 / 3
		}
		hi, total := bits.Mul64(uint64(n), uint64(elem))
		if hi == 0 && total > 4<<20 && total <= fuzzMaxAlloc {
			return // it would succeed, and checking gigabytes are zero costs too much
		}
		p, err := fuzzAllocs[i].Calloc(n, elem)
		switch {
		case n == 0 || elem == 0:
			require.Nil(t, p)
			require.NoError(t, err)
			return
		case hi != 0:
			requireNoBlock(t, p, err, alloc.ErrOverflow)
			return
		}
		ok, foot := m.fits(i, uintptr(total), fuzzAlign[i])
		if !ok {
			requireNoBlock(t, p, err, alloc.ErrPoolExhausted, heap.ErrTooLarge)
			return
		}
		require.NoError(t, err)
		m.add(p, uintptr(total), i, foot, true)

	case 2: // aligned alloc
		i := int(m.byte() % 3)
		al := fuzzAlignments[int(m.byte())%len(fuzzAlignments)]
		size := m.size()
		p, err := fuzzAllocs[i].AlignedAlloc(al, size)
		if al == 0 || al&(al-1) != 0 {
			requireNoBlock(t, p, err, alloc.ErrInvalidArgument)
			return
		}
		if size == 0 {
			require.Nil(t, p)
			require.NoError(t, err)
			return
		}
		eff := max(fuzzAlign[i], al)
		ok, foot := m.fits(i, size, eff)
		if !ok {
			requireNoBlock(t, p, err, alloc.ErrPoolExhausted, heap.ErrTooLarge)
			return
		}
		require.NoError(t, err, "aligned alloc %d/%d on %d", size, al, i)
		require.Zero(t, uintptr(p)%eff, "alignment %d", eff)
		m.add(p, size, i, foot, false)

	case 3: // realloc
		k, ok := m.pick()
		if !ok {
			return
		}
		to := int(m.byte() % 4) // 3: the block's own allocator (nil)
		size := m.size()
		old := m.live[k]
		var dst *alloc.Allocator
		di := old.a
		if to < 3 {
			dst, di = fuzzAllocs[to], to
		}
		var p unsafe.Pointer
		var err error
		if dst == nil {
			p, err = ompglue.Realloc(old.p, size) // omp_realloc's omp_null_allocator
		} else {
			p, err = dst.Realloc(old.p, size)
		}
		if size == 0 {
			require.Nil(t, p)
			require.NoError(t, err)
			m.remove(k)
			return
		}
		if err == nil && p == old.p {
			// Resized in place (within its size class or page run): only
			// into its own allocator, and its footprint, so the pool, is as
			// it was.
			require.Equal(t, old.a, di, "in place only into the block's own allocator")
			kept := min(old.size, size, 4096)
			require.True(t, holds(bytesAt(p, kept), old.seed), "realloc in place kept the first %d bytes", kept)
			m.remove(k)
			m.add(p, size, di, old.foot, false)
			return
		}
		fits, foot := m.fits(di, size, fuzzAlign[di])
		if !fits {
			requireNoBlock(t, p, err, alloc.ErrPoolExhausted, heap.ErrTooLarge)
			m.verify(old, true) // the old block is intact
			return
		}
		require.NoError(t, err)
		require.Zero(t, uintptr(p)%fuzzAlign[di])
		kept := min(old.size, size, 4096)
		require.True(t, holds(bytesAt(p, kept), old.seed), "realloc kept the first %d bytes", kept)
		m.remove(k)
		m.add(p, size, di, foot, false)

	case 4: // free
		if k, ok := m.pick(); ok {
			b := m.remove(k)
			m.verify(b, true)
			require.NoError(t, alloc.Free(b.p))
		}

	case 5: // free through another allocator
		if k, ok := m.pick(); ok {
			b := m.remove(k)
			m.verify(b, true)
			require.NoError(t, fuzzAllocs[(b.a+1+int(m.byte()%2))%3].Free(b.p))
		}

	case 6: // double free
		if k, ok := m.pick(); ok {
			b := m.remove(k)
			require.NoError(t, alloc.Free(b.p))
			err := alloc.Free(b.p)
			require.True(t, errors.Is(err, alloc.ErrDoubleFree) || errors.Is(err, alloc.ErrInvalidPointer), "double free: %v", err)
		}

	case 7: // foreign and interior pointers
		var p unsafe.Pointer
		switch m.byte() % 4 {
		case 0:
			p = goPtr()
		case 1:
			p = cmem.Ptr(fuzzForeign + uintptr(m.byte())*16)
		default:
			k, ok := m.pick()
			if !ok {
				return
			}
			b := m.live[k]
			off := (uintptr(m.byte())%16 + 1) * 16
			if off >= b.size {
				return
			}
			p = unsafe.Add(b.p, off)
		}
		require.ErrorIs(t, alloc.Free(p), alloc.ErrInvalidPointer)
		_, err := ompglue.Realloc(p, 10)
		require.ErrorIs(t, err, alloc.ErrInvalidPointer)

	case 8: // full check
		for _, b := range m.live {
			m.verify(b, true)
		}
	}
}
