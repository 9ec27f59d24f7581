package heap

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/procstatus"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/pcpu"
	"github.com/ompalloc/ompalloc/internal/testenv"
)

func newTestHeap(t testing.TB) *Heap {
	h := New(MapSource{}, Config{Name: t.Name(), KeepChunks: 1})
	t.Cleanup(func() { h.Close() })
	return h
}

// TestBlockCostAsGlibc: up to 4 KiB, a block costs what it does in glibc
// (its size plus an 8-byte header, rounded up to 16; at least 32) plus its
// share of its span's unusable tail: at most a byte up to 1 KiB and 0.35%
// above (what 1 MiB spans of 16-byte-step classes allow; glibc's own
// measured overhead at 4000 bytes is 0.1%), at every size, not only at the
// sizes a benchmark shows.
func TestBlockCostAsGlibc(t *testing.T) {
	for size := uintptr(1); size <= 4096; size++ {
		c := classFor(size+hdrSize, minAlign)
		require.GreaterOrEqual(t, c, 0)
		slots := (classPages[c]*pageSize - hdrSize) / classSize[c]
		cost := float64(classPages[c]*pageSize) / float64(slots)
		glibc := float64(max(32, (size+hdrSize+15)&^15))
		limit := max(glibc+1, glibc*1.0035)
		if size > 4072 { // no 4096-byte class: 4112 is a tenth of a glibc step more
			limit = glibc + 16 + 6
		}
		require.LessOrEqual(t, cost, limit, "%d bytes: class %d, %d pages", size, classSize[c], classPages[c])
	}
}

func TestClassTable(t *testing.T) {
	for c := 1; c < numClasses; c++ {
		require.Greater(t, classSize[c], classSize[c-1])
		if s := classSize[c]; s > 4096 && (s-16)&(s-17) != 0 { // above the 16-byte steps, all but the power-of-two + 16 classes
			require.Zero(t, s%1024, "class %d", s)
		}
		require.LessOrEqual(t, classPages[c], uintptr(maxSpanPgs))
		if classSize[c-1] >= 128 {
			require.LessOrEqual(t, float64(classSize[c])/float64(classSize[c-1]), 1.25+1e-9)
		}
	}
	for _, tc := range []struct{ need, align, want uintptr }{
		{80, 16, 80}, {81, 16, 96}, {128, 64, 128}, {129, 64, 192}, {32 << 10, 16, 32 << 10}, {8192 + 16, 4096, 12288},
		{4096 + 16, 16, 4112}, {4096 + 17, 16, 5120}, {4096 + 64, 64, 5120}, {1024 + 16, 16, 1040}, {1024 + 8, 16, 1040}, {1000 + 8, 16, 1008}, {100 + 8, 16, 112}, {256 + 16, 16, 272}, {257, 16, 272},
	} {
		c := classFor(tc.need, tc.align)
		require.GreaterOrEqual(t, c, 0)
		require.Equal(t, tc.want, classSize[c], "need %d align %d", tc.need, tc.align)
	}
	require.Equal(t, -1, classFor(maxSmall+1, 16))
}

func TestAllocSizesAndAlignments(t *testing.T) {
	h := newTestHeap(t)
	for _, size := range []uintptr{0, 1, 15, 16, 64, 100, 1000, 4096, 32 << 10, 40 << 10, 1 << 20, 2 << 20, 3 << 20, 9 << 20} {
		for _, align := range []uintptr{16, 32, 64, 4096, 64 << 10, 1 << 20, 8 << 20} {
			t.Run(fmt.Sprintf("%d/%d", size, align), func(t *testing.T) {
				p, foot, err := h.Alloc(size, align, 7, true)
				require.NoError(t, err)
				require.Zero(t, p%align, "misaligned %#x", p)
				require.GreaterOrEqual(t, foot, size)
				b := cmem.Bytes(p, size)
				require.Equal(t, -1, bytes.IndexFunc(b, func(r rune) bool { return r != 0 }), "calloc'ed memory is zero")
				for i := range b {
					b[i] = byte(i)
				}
				blk, err := Inspect(p)
				require.NoError(t, err)
				require.Equal(t, Block{Heap: h, Owner: 7, Size: size, Footprint: foot}, blk)
				blk, err = Free(p)
				require.NoError(t, err)
				require.Equal(t, size, blk.Size)
			})
		}
	}
}

func TestHeaderOverheadAtDefaultAlignment(t *testing.T) {
	h := newTestHeap(t)
	for size := uintptr(16); size <= 1024; size += 16 {
		_, foot, err := h.Alloc(size, 16, 0, false)
		require.NoError(t, err)
		// The slot holds the header and the data; class rounding aside, the
		// header is the only overhead.
		c := classFor(size+hdrSize, 16)
		require.Equal(t, classSize[c], foot)
		require.LessOrEqual(t, classSize[smallIndex[(size+minAlign-1)/minAlign]], foot)
	}
	p, foot, err := h.Alloc(48, 16, 0, false)
	require.NoError(t, err)
	require.Equal(t, uintptr(64), foot, "48 bytes + 16-byte header fill a 64-byte slot exactly")
	_, err = Free(p)
	require.NoError(t, err)
}

func TestBadFrees(t *testing.T) {
	h := newTestHeap(t)
	small, _, err := h.Alloc(64, 16, 1, false)
	require.NoError(t, err)
	large, _, err := h.Alloc(100<<10, 16, 1, false)
	require.NoError(t, err)
	huge, _, err := h.Alloc(5<<20, 16, 1, false)
	require.NoError(t, err)
	var goVar [64]byte

	tests := []struct {
		name string
		p    uintptr
		want error
	}{
		{"nil", 0, ErrForeign},
		{"go memory", uintptr(cmemAddr(&goVar[0])), ErrForeign},
		{"small interior", small + 8, ErrInvalid},
		{"small interior 16", small + 16, ErrInvalid},
		{"large interior", large + 4096, ErrInvalid},
		{"huge interior", huge + 64, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Free(tc.p)
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), fmt.Sprintf("%#x", tc.p))
		})
	}
	for _, p := range []uintptr{small, large, huge} {
		_, err := Free(p)
		require.NoError(t, err)
		_, err = Free(p)
		require.Error(t, err, "second free of %#x", p)
		require.True(t, errors.Is(err, ErrDoubleFree) || errors.Is(err, ErrForeign), "%v", err)
	}
	// The heap still works.
	p, _, err := h.Alloc(64, 16, 1, false)
	require.NoError(t, err)
	_, err = Free(p)
	require.NoError(t, err)
}

func cmemAddr(b *byte) uintptr { return uintptr(unsafePointer(b)) }

func TestTrimReturnsMemory(t *testing.T) {
	h := newTestHeap(t)
	var ps []uintptr
	for i := 0; i < 20000; i++ {
		p, _, err := h.Alloc(uintptr(64+i%200), 16, 0, false)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	for i := 0; i < 20; i++ {
		p, _, err := h.Alloc(uintptr(100<<10*(i%5+1)), 16, 0, false)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	require.NotZero(t, h.Stats().Mapped)
	for _, p := range ps {
		_, err := Free(p)
		require.NoError(t, err)
	}
	h.Trim()
	st := h.Stats()
	require.Zero(t, st.Mapped, "%+v", st)
	require.Zero(t, st.Chunks)
}

func TestRSSReturnsAfterTrim(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	if pcpu.RaceEnabled {
		t.Skip("the race detector's shadow memory moves RSS")
	}
	if why, ok := testenv.Emulated(); ok {
		t.Skip(why)
	}
	h := newTestHeap(t)
	ps := make([]uintptr, 0, 100016)
	debug.FreeOSMemory()
	before := rssKiB(t)
	for i := 0; i < 100000; i++ {
		p, _, err := h.Alloc(uintptr(64+i%400), 16, 0, false)
		require.NoError(t, err)
		cmem.Bytes(p, 64)[0] = 1
		ps = append(ps, p)
	}
	for i := 0; i < 16; i++ {
		p, _, err := h.Alloc(1<<20, 16, 0, true)
		require.NoError(t, err)
		clear(cmem.Bytes(p, 1<<20))
		ps = append(ps, p)
	}
	require.Greater(t, rssKiB(t), before+20<<10, "the blocks were touched")
	for _, p := range ps {
		_, err := Free(p)
		require.NoError(t, err)
	}
	h.Trim()
	debug.FreeOSMemory()
	require.Less(t, rssKiB(t), before+1024, "RSS returns within 1 MiB")
}

func rssKiB(t testing.TB) int {
	n, ok := procstatus.VmRSSKiB()
	require.True(t, ok, "VmRSS")
	return n
}

func TestConcurrentIntegrity(t *testing.T) {
	h := newTestHeap(t)
	const workers, rounds = 8, 3000
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			type blk struct {
				p, n uintptr
				tag  byte
			}
			var live []blk
			for i := 0; i < rounds; i++ {
				n := uintptr((i*37+w*11)%3000 + 1)
				if i%97 == 0 {
					n = uintptr(70<<10 + w)
				}
				p, _, err := h.Alloc(n, 16<<(i%4), uint32(w), false)
				if err != nil {
					errs <- err
					return
				}
				tag := byte(w*31 + i)
				b := cmem.Bytes(p, n)
				for j := range b {
					b[j] = tag
				}
				live = append(live, blk{p, n, tag})
				if len(live) > 50 || i%3 == 0 {
					k := (i * 7) % len(live)
					x := live[k]
					live = append(live[:k], live[k+1:]...)
					for j, v := range cmem.Bytes(x.p, x.n) {
						if v != x.tag {
							errs <- fmt.Errorf("worker %d: byte %d of %#x is %d, want %d", w, j, x.p, v, x.tag)
							return
						}
					}
					blk, err := Free(x.p)
					if err != nil || blk.Owner != uint32(w) || blk.Size != x.n {
						errs <- fmt.Errorf("free %#x: %+v %v", x.p, blk, err)
						return
					}
				}
			}
			for _, x := range live {
				if _, err := Free(x.p); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	h.Trim()
	require.Zero(t, h.Stats().Mapped)
}

func TestConcurrentDoubleFreeOnlyOneWins(t *testing.T) {
	h := newTestHeap(t)
	for i := 0; i < 200; i++ {
		p, _, err := h.Alloc(64, 16, 0, false)
		require.NoError(t, err)
		var wg sync.WaitGroup
		var ok, dup int32
		var mu sync.Mutex
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := Free(p)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					ok++
				} else if errors.Is(err, ErrDoubleFree) {
					dup++
				}
			}()
		}
		wg.Wait()
		require.Equal(t, int32(1), ok)
		require.Equal(t, int32(3), dup)
	}
}

type failingSource struct{ after int }

func (f *failingSource) Acquire(n, align uintptr) (uintptr, error) {
	if f.after == 0 {
		return 0, errors.New("injected")
	}
	f.after--
	return MapSource{}.Acquire(n, align)
}
func (f *failingSource) Release(p, n uintptr) error { return MapSource{}.Release(p, n) }

func TestSourceFailure(t *testing.T) {
	h := New(&failingSource{after: 1}, Config{Name: "failing"})
	defer h.Close()
	p, _, err := h.Alloc(64, 16, 0, false)
	require.NoError(t, err)
	_, _, err = h.Alloc(8<<20, 16, 0, false)
	require.ErrorIs(t, err, ErrNoMemory)
	require.ErrorContains(t, err, "injected")
	_, err = Free(p)
	require.NoError(t, err)
}

func TestRetainedHugeReuse(t *testing.T) {
	h := New(MapSource{}, Config{Name: "keep", KeepHuge: 64 << 20})
	defer h.Close()
	p, _, err := h.Alloc(10<<20, 16, 0, false)
	require.NoError(t, err)
	_, err = Free(p)
	require.NoError(t, err)
	_, err = Free(p)
	require.ErrorIs(t, err, ErrDoubleFree)
	q, _, err := h.Alloc(9<<20, 16, 0, true)
	require.NoError(t, err)
	require.Equal(t, p, q, "a retained region that fits is reused")
	require.Zero(t, cmem.Bytes(q, 9<<20)[5<<20])
	r, _, err := h.Alloc(1<<20, 16, 0, false) // not huge: unaffected
	require.NoError(t, err)
	for _, x := range []uintptr{q, r} {
		_, err = Free(x)
		require.NoError(t, err)
	}
	require.Equal(t, uintptr(10<<20), h.Stats().Retained)
	h.Trim()
	require.Zero(t, h.Stats().Mapped)
}

// A slot first used for a 64-aligned block, freed, then reused for a
// 16-aligned one keeps the old (free) header inside the new block's bytes:
// a pointer there is inside a live block, not a double free.
func TestInteriorPointerOverStaleHeader(t *testing.T) {
	h := newTestHeap(t)
	p, _, err := h.Alloc(48, 64, 1, false) // slot of 128, user pointer at +56
	require.NoError(t, err)
	_, err = Free(p)
	require.NoError(t, err)
	q, _, err := h.Alloc(120, 16, 1, false) // the same slot, user pointer at +8
	require.NoError(t, err)
	require.Equal(t, p-48, q, "the slot is reused")
	_, err = Free(p)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = Inspect(p)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = Free(q)
	require.NoError(t, err)
	_, err = Free(q)
	require.ErrorIs(t, err, ErrDoubleFree)
}
