package heap

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Containing finds the live block an address points into, and nothing for
// headers, padding, free slots, freed large blocks and foreign memory.
func TestContaining(t *testing.T) {
	h := newTestHeap(t)
	alloc := func(size, align uintptr) uintptr {
		p, _, err := h.Alloc(size, align, 1, false)
		require.NoError(t, err)
		return p
	}
	small := alloc(64, 16)
	aligned := alloc(100, 64) // at offset 56 of its slot, padding before the header
	medium := alloc(1<<20, 16)
	huge := alloc(9<<20, 16)
	freed := alloc(64, 16)
	freedMedium := alloc(256<<10, 16)
	for _, p := range []uintptr{freed, freedMedium} {
		_, err := Free(p)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, p := range []uintptr{small, aligned, medium, huge} {
			_, err := Free(p)
			require.NoError(t, err)
		}
	})
	var foreign [64]byte

	tests := []struct {
		name        string
		p           uintptr
		start, size uintptr // size 0: not found
	}{
		{"small start", small, small, 64},
		{"small middle", small + 8, small, 64},
		{"small last byte", small + 63, small, 64},
		{"small one past end", small + 64, 0, 0},
		{"small header first byte", small - hdrSize, 0, 0},
		{"small header last byte", small - 1, 0, 0},
		{"aligned start", aligned, aligned, 100},
		{"aligned middle", aligned + 50, aligned, 100},
		{"aligned last byte", aligned + 99, aligned, 100},
		{"aligned one past end", aligned + 100, 0, 0},
		{"aligned header", aligned - 4, 0, 0},
		{"aligned padding", aligned - 40, 0, 0},
		{"freed small", freed, 0, 0},
		{"freed small middle", freed + 8, 0, 0},
		{"medium start", medium, medium, 1 << 20},
		{"medium later page", medium + 5*pageSize + 3, medium, 1 << 20},
		{"medium last byte", medium + 1<<20 - 1, medium, 1 << 20},
		{"medium one past end", medium + 1<<20, 0, 0},
		{"freed medium", freedMedium + 100, 0, 0},
		{"huge start", huge, huge, 9 << 20},
		{"huge later granule", huge + 5<<20, huge, 9 << 20},
		{"huge last byte", huge + 9<<20 - 1, huge, 9 << 20},
		{"foreign", cmemAddr(&foreign[8]), 0, 0},
		{"nil", 0, 0, 0},
		{"top of the address space", ^uintptr(0), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, size, ok := Containing(tt.p)
			require.Equal(t, tt.size != 0, ok, "%#x", tt.p)
			require.Equal(t, tt.start, start, "start of %#x", tt.p)
			require.Equal(t, tt.size, size)
		})
	}
}

// Every byte of every small class's block maps back to that block, and the
// slot's header and the bytes past the requested size to none.
func TestContainingEveryClass(t *testing.T) {
	h := newTestHeap(t)
	for c := 0; c < numClasses; c++ {
		size := classSize[c] - hdrSize - 3
		t.Run(fmt.Sprint(classSize[c]), func(t *testing.T) {
			var ps []uintptr
			for range 3 { // neighbours in one span
				p, _, err := h.Alloc(size, 16, 1, false)
				require.NoError(t, err)
				ps = append(ps, p)
			}
			for _, p := range ps {
				for _, q := range []uintptr{p, p + size/2, p + size - 1} {
					start, n, ok := Containing(q)
					require.True(t, ok, "%#x in block %#x", q, p)
					require.Equal(t, p, start)
					require.Equal(t, size, n)
				}
				_, _, ok := Containing(p + size)
				require.False(t, ok, "one past the end of %#x", p)
				_, _, ok = Containing(p - 1)
				require.False(t, ok, "header of %#x", p)
			}
			for _, p := range ps {
				_, err := Free(p)
				require.NoError(t, err)
			}
		})
	}
}

// Containing runs while other goroutines allocate and free, in the same
// spans: answers about one's own live blocks stay right, probes of freed
// small blocks never fault (go test -race checks the Go side).
func TestContainingConcurrent(t *testing.T) {
	h := newTestHeap(t)
	sizes := []uintptr{24, 64, 100, 1000, 5000, 200 << 10}
	done := make(chan error, 4)
	for g := range 4 {
		go func() {
			done <- func() error {
				var stale []uintptr
				for i := range 2000 {
					size := sizes[(i+g)%len(sizes)]
					p, _, err := h.Alloc(size, 16<<(i%3), 1, false)
					if err != nil {
						return err
					}
					for _, q := range []uintptr{p, p + size/2, p + size - 1} {
						if start, n, ok := Containing(q); !ok || start != p || n != size {
							return fmt.Errorf("Containing(%#x) in block %#x of %d: %#x %d %v", q, p, size, start, n, ok)
						}
					}
					for _, q := range stale {
						Containing(q + 8)
					}
					if _, err := Free(p); err != nil {
						return err
					}
					if size < maxSmall && len(stale) < 8 {
						stale = append(stale, p)
					}
				}
				return nil
			}()
		}()
	}
	for range 4 {
		require.NoError(t, <-done)
	}
}
