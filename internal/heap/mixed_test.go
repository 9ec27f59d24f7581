package heap

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
)

// budgetSource is a PartialSource with a budget of usable bytes, as a
// pinned heap under a pinned-bytes limit below a chunk: a chunk is mapped
// whole and only what the budget allows is usable.
type budgetSource struct {
	MapSource
	mu       sync.Mutex
	budget   uintptr
	used     uintptr
	usable   map[uintptr]uintptr
	released int
}

var errBudget = errors.New("over budget")

func (s *budgetSource) Acquire(n, align uintptr) (uintptr, error) {
	p, _, err := s.AcquireChunk(n, align, n)
	return p, err
}

func (s *budgetSource) AcquireChunk(n, align, need uintptr) (uintptr, uintptr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	usable := min(n, (s.budget-s.used)&^(pageSize-1))
	if usable < need {
		return 0, 0, errBudget
	}
	p, err := s.MapSource.Acquire(n, align)
	if err != nil {
		return 0, 0, err
	}
	s.used += usable
	if s.usable == nil {
		s.usable = map[uintptr]uintptr{}
	}
	s.usable[p] = usable
	return p, usable, nil
}

func (s *budgetSource) Release(p, n uintptr) error {
	s.mu.Lock()
	s.used -= s.usable[p]
	delete(s.usable, p)
	s.released++
	s.mu.Unlock()
	return s.MapSource.Release(p, n)
}

// Issue 23, item 2: where the source makes only part of a chunk usable,
// small blocks of every size and alignment share its pages first fit; each
// is a block like any other to Free, Inspect, Room, Resize and Containing;
// double, interior and stale frees are refused; Trim gives the chunk back.
func TestMixedSpanServesEverySize(t *testing.T) {
	src := &budgetSource{budget: 64 << 10}
	h := New(src, Config{Name: t.Name(), KeepChunks: 1})
	t.Cleanup(h.Close)

	type blk struct{ p, n, align uintptr }
	var live []blk
	var foot uintptr
	sizes := []uintptr{1000, 1000, 16000, 24, 4000, 100, 20000}
	for i := 0; ; i++ {
		n, align := uintptr(3000), uintptr(16)<<(i%4) // 16, 32, 64, 128
		if i < len(sizes) {
			n = sizes[i]
		}
		p, f, err := h.Alloc(n, align, 7, false)
		if i >= len(sizes) && err != nil {
			require.ErrorIs(t, err, ErrNoMemory, "full")
			require.ErrorIs(t, err, errBudget, "the source's refusal, not a corruption")
			require.Greater(t, foot+Footprint(n, align), uintptr(64<<10)-hdrSize, "refused only when it does not fit")
			break
		}
		require.NoError(t, err, "%d bytes aligned to %d beside %d bytes of blocks", n, align, foot)
		require.Zero(t, p%align)
		require.Equal(t, Footprint(n, align), f)
		foot += f
		cb := cmem.Bytes(p, n)
		for j := range cb {
			cb[j] = byte(i + 1)
		}
		live = append(live, blk{p, n, align})
	}
	for i, b := range live { // no block wrote over another
		for j, c := range cmem.Bytes(b.p, b.n) {
			require.Equal(t, byte(i+1), c, "block %d byte %d", i, j)
		}
		got, err := Inspect(b.p)
		require.NoError(t, err)
		require.Equal(t, Block{Heap: h, Owner: 7, Size: b.n, Footprint: Footprint(b.n, b.align)}, got)
		start, size, ok := Containing(b.p + b.n - 1)
		require.True(t, ok)
		require.Equal(t, [2]uintptr{b.p, b.n}, [2]uintptr{start, size})
		_, _, ok = Containing(b.p - 4)
		require.False(t, ok, "a header is no block")
	}
	st := h.Stats()
	require.Equal(t, uintptr(64<<10), st.Mapped)
	require.Equal(t, 1, st.Chunks)

	b := live[3]
	_, room, err := Room(b.p)
	require.NoError(t, err)
	require.GreaterOrEqual(t, room, b.n)
	_, ok, err := Resize(b.p, room)
	require.NoError(t, err)
	require.True(t, ok)
	got, err := Inspect(b.p)
	require.NoError(t, err)
	require.Equal(t, room, got.Size)
	_, ok, err = ResizeInClass(b.p, b.n, 16)
	require.NoError(t, err)
	require.False(t, ok, "a mixed block moves on realloc")

	_, err = Free(live[2].p + 16)
	require.ErrorIs(t, err, ErrInvalid, "inside a block")
	fb, err := Free(live[2].p)
	require.NoError(t, err)
	require.Equal(t, Block{Heap: h, Owner: 7, Size: 16000, Footprint: Footprint(16000, 16)}, fb)
	_, err = Free(live[2].p)
	require.ErrorIs(t, err, ErrDoubleFree)
	_, err = Inspect(live[2].p)
	require.ErrorIs(t, err, ErrDoubleFree)

	// Its bytes serve blocks of other sizes, zeroed when asked.
	var again []uintptr
	for range 3 {
		p, _, err := h.Alloc(5000, 16, 8, true)
		require.NoError(t, err)
		for j, c := range cmem.Bytes(p, 5000) {
			require.Zero(t, c, "byte %d of a zeroed block", j)
		}
		again = append(again, p)
	}
	for _, p := range again {
		_, err := Free(p)
		require.NoError(t, err)
	}
	for _, b := range append(live[:2], live[3:]...) {
		_, err := Free(b.p)
		require.NoError(t, err)
	}
	_, err = Free(live[0].p)
	require.Error(t, err, "the span is gone with its last block: a stale free is refused")
	require.Equal(t, 1, h.Stats().EmptyChunks)
	h.Trim()
	require.Zero(t, h.Stats().Mapped)
	require.Zero(t, src.used)
	require.Equal(t, 1, src.released)
}

// Blocks freed in every order merge back into one free extent: a mixed
// span whose blocks were all freed gives its pages back, and one that
// grows into the next page joins its free bytes.
func TestMixedSpanGrowsAndMerges(t *testing.T) {
	src := &budgetSource{budget: 256 << 10}
	h := New(src, Config{Name: t.Name()})
	t.Cleanup(h.Close)
	for round := range 3 {
		var ps []uintptr
		for i := 0; ; i++ {
			p, _, err := h.Alloc(uintptr(16+(i*977)%9000), 16, 1, false)
			if err != nil {
				require.ErrorIs(t, err, errBudget)
				break
			}
			ps = append(ps, p)
		}
		require.Greater(t, len(ps), 40, "round %d", round)
		h.mu.Lock()
		require.Len(t, h.mixed, 1, "one span grown over the usable pages")
		require.Equal(t, uintptr(4), h.mixed[0].npages)
		h.mu.Unlock()
		for i := range ps { // odd ones first, then even: merges both ways
			j := (2*i + 1) % len(ps)
			if i >= len(ps)/2 {
				j = 2 * (i - len(ps)/2)
			}
			if j < len(ps) && ps[j] != 0 {
				_, err := Free(ps[j])
				require.NoError(t, err)
				ps[j] = 0
			}
		}
		for _, p := range ps {
			if p != 0 {
				_, err := Free(p)
				require.NoError(t, err)
			}
		}
		h.mu.Lock()
		require.Empty(t, h.mixed, "round %d: the span went with its last block", round)
		h.mu.Unlock()
	}
}

// Goroutines allocate, fill, check and free blocks of random sizes and
// alignments in mixed spans that grow, empty and go: every block keeps its
// bytes, and the budget is all back at the end. (Double frees racing a
// reallocation of the same address free the new block, as anywhere:
// RELIABILITY.md; they are tested apart.)
func TestMixedSpanHammer(t *testing.T) {
	src := &budgetSource{budget: 256 << 10}
	h := New(src, Config{Name: t.Name(), KeepChunks: 1}) // as pinned heaps keep theirs: not released at each emptying
	t.Cleanup(h.Close)
	const workers, rounds = 4, 2000
	var wg sync.WaitGroup
	var served, refused atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var live []uintptr
			for i := range rounds {
				n := uintptr(16 + (i*7919+w*104729)%6000)
				if p, _, err := h.Alloc(n, 16<<(i%3), uint32(w+1), i%5 == 0); err == nil {
					clear := cmem.Bytes(p, n)
					if i%5 == 0 && slices.ContainsFunc(clear, func(c byte) bool { return c != 0 }) {
						t.Errorf("a zeroed block of %d bytes at %#x is not zero", n, p)
						return
					}
					for j := range clear {
						clear[j] = byte(w*31 + i)
					}
					live = append(live, p)
					served.Add(1)
				} else if errors.Is(err, errBudget) {
					refused.Add(1)
				} else {
					t.Errorf("alloc: %v", err)
					return
				}
				if len(live) > 6 || i == rounds-1 {
					for _, p := range live {
						b, err := Inspect(p)
						if err != nil {
							t.Errorf("inspect %#x: %v", p, err)
							return
						}
						first := cmem.Bytes(p, 1)[0]
						for j, c := range cmem.Bytes(p, b.Size) {
							if c != first {
								t.Errorf("block %#x byte %d: %d, not %d", p, j, c, first)
								return
							}
						}
						if _, err := Free(p); err != nil {
							t.Errorf("free %#x: %v", p, err)
							return
						}
					}
					live = live[:0]
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d blocks served, %d refused", served.Load(), refused.Load())
	h.Trim()
	require.Zero(t, h.Stats().Mapped)
	require.Zero(t, src.used)
}
