package alloc

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// arrowAllocator is Apache Arrow Go's memory.Allocator (arrow/memory),
// declared here so that the module need not import Arrow.
type arrowAllocator interface {
	Allocate(size int) []byte
	Reallocate(size int, b []byte) []byte
	Free(b []byte)
}

// A compile-time check only: calling NewArrowAllocator(nil) here would read OMP_ALLOCATOR
// at package init, before TestMain takes the user's settings away.
var _ arrowAllocator = ArrowAllocator{}

func TestBytesMethodSetIsArrowsAllocator(t *testing.T) {
	got := reflect.TypeOf(ArrowAllocator{})
	want := reflect.TypeOf((*arrowAllocator)(nil)).Elem()
	// Arrow's methods, and AllocatedBytes as Arrow's Mallocator has it.
	require.Equal(t, want.NumMethod()+1, got.NumMethod(), "exactly Arrow's methods and AllocatedBytes, no more")
	ab, ok := got.MethodByName("AllocatedBytes")
	require.True(t, ok)
	require.Equal(t, reflect.TypeOf(func() int64 { return 0 }), reflect.FuncOf(nil, []reflect.Type{ab.Type.Out(0)}, false))
	for i := range want.NumMethod() {
		m := want.Method(i)
		g, ok := got.MethodByName(m.Name)
		require.True(t, ok, m.Name)
		// The method's type without its receiver.
		in := make([]reflect.Type, g.Type.NumIn()-1)
		for j := range in {
			in[j] = g.Type.In(j + 1)
		}
		out := make([]reflect.Type, g.Type.NumOut())
		for j := range out {
			out[j] = g.Type.Out(j)
		}
		require.Equal(t, m.Type, reflect.FuncOf(in, out, false), m.Name)
	}
}

// recovered runs f and returns the error it panicked with (nil if none).
func recovered(t *testing.T, f func()) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(error)
			require.True(t, ok, "the panic value is an error: %#v", r)
			err = e
		}
	}()
	f()
	return nil
}

func dataOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func TestBytesAllocate(t *testing.T) {
	a := mustNew(t, memspace.Default)
	mem := NewArrowAllocator(a)
	for _, size := range []int{1, 15, 63, 64, 100, 4000, 40 << 10, 1 << 20, 5 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			// Dirty the memory the next block is likely to get, so that
			// zeroing is what the check below sees, not fresh pages.
			d := mem.Allocate(size)
			for i := range d {
				d[i] = 0xff
			}
			mem.Free(d)

			b := mem.Allocate(size)
			require.Len(t, b, size)
			require.Equal(t, size, cap(b))
			require.Zero(t, dataOf(b)%arrowAlignment, "64-byte aligned")
			require.Equal(t, -1, indexNonZero(b), "zeroed")
			st := a.Stats()
			require.Equal(t, int64(1), st.BlocksLive)
			require.Equal(t, int64(size), st.BytesLive, "counted in the allocator's Stats")
			info, err := InspectSlice(b)
			require.NoError(t, err)
			require.Same(t, a, info.Allocator)
			mem.Free(b[:0]) // re-sliced to length 0: still the block
			require.Zero(t, a.Stats().BlocksLive)
		})
	}
	z := mem.Allocate(0)
	require.NotNil(t, z, "Allocate(0) is a valid empty slice")
	require.Empty(t, z)
	mem.Free(z)
	require.Zero(t, a.Stats().Allocs-a.Stats().Frees)
}

func indexNonZero(b []byte) int {
	for i, x := range b {
		if x != 0 {
			return i
		}
	}
	return -1
}

func TestBytesReallocateInPlaceWhenRoom(t *testing.T) {
	a := mustNew(t, memspace.Default)
	mem := NewArrowAllocator(a)
	for _, size := range []int{100, 3000, 100 << 10, 3 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			b := mem.Allocate(size)
			info, err := InspectSlice(b)
			require.NoError(t, err)
			room := int(info.Room)
			require.GreaterOrEqual(t, room, size)
			p := dataOf(b)

			b = mem.Reallocate(room, b) // grows into the block's room
			require.Equal(t, p, dataOf(b), "in place")
			require.Len(t, b, room)
			for i := range b {
				b[i] = byte(i) | 1
			}
			b = mem.Reallocate(10, b) // shrinks in place
			require.Equal(t, p, dataOf(b))
			require.Equal(t, int64(10), a.Stats().BytesLive)
			b = mem.Reallocate(room, b) // grows again: the bytes past 10 are zero, not the old ones
			require.Equal(t, p, dataOf(b))
			require.Equal(t, []byte{1, 1, 3, 3, 5, 5, 7, 7, 9, 9}, b[:10])
			require.Equal(t, -1, indexNonZero(b[10:]))
			require.Equal(t, int64(room), a.Stats().BytesLive)
			require.Equal(t, int64(1), a.Stats().BlocksLive)

			c := mem.Reallocate(room+1, b) // no room: moves
			require.NotEqual(t, p, dataOf(c))
			require.Zero(t, dataOf(c)%arrowAlignment)
			require.Len(t, c, room+1)
			require.Equal(t, []byte{1, 1, 3, 3, 5, 5, 7, 7, 9, 9}, c[:10])
			require.Equal(t, -1, indexNonZero(c[10:]))
			st := a.Stats()
			require.Equal(t, int64(1), st.BlocksLive, "the old block was freed")
			require.Equal(t, int64(room+1), st.BytesLive)

			e := mem.Reallocate(0, c)
			require.Empty(t, e)
			require.Zero(t, a.Stats().BlocksLive)
			f := mem.Reallocate(size, e) // an empty slice: Allocate
			require.Len(t, f, size)
			mem.Free(f)
			require.Zero(t, a.Stats().BytesLive)
		})
	}
}

func TestBytesFailuresPanicWithSentinels(t *testing.T) {
	a := mustNew(t, memspace.Default)
	other := mustNew(t, memspace.Default)
	mem, otherMem := NewArrowAllocator(a), NewArrowAllocator(other)
	strict := mustNew(t, memspace.Default, WithPoolSize(1<<20), WithFallback(traits.NullFb))
	dead, err := New(memspace.Default)
	require.NoError(t, err)
	require.NoError(t, dead.Destroy())

	b := mem.Allocate(100)
	freed := mem.Allocate(100)
	mem.Free(freed)
	goHeap := make([]byte, 100)
	orig := mem.Allocate(8)
	appended := append(orig, 1) // grown by append: a copy on the Go heap
	for _, tc := range []struct {
		name string
		f    func()
		want error
		text string
	}{
		{"negative Allocate", func() { mem.Allocate(-1) }, ErrInvalidArgument, "negative size"},
		{"negative Reallocate", func() { mem.Reallocate(-1, b) }, ErrInvalidArgument, "negative size"},
		{"pool exhausted", func() { NewArrowAllocator(strict).Allocate(2 << 20) }, ErrPoolExhausted, "do not fit"},
		{"destroyed", func() { NewArrowAllocator(dead).Allocate(8) }, ErrDestroyed, "destroyed"},
		{"Go memory", func() { mem.Free(goHeap) }, ErrInvalidPointer, "never came from ompalloc"},
		{"grown by append", func() { mem.Free(appended) }, ErrInvalidPointer, "never came from ompalloc"},
		{"re-sliced", func() { mem.Free(b[16:]) }, ErrInvalidPointer, "re-sliced from further in"},
		{"double free", func() { mem.Free(freed) }, ErrDoubleFree, "already freed"},
		{"another allocator's", func() { otherMem.Free(b) }, ErrInvalidArgument, "not from " + other.String()},
		{"Reallocate of another allocator's", func() { otherMem.Reallocate(200, b) }, ErrInvalidArgument, "not from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := recovered(t, tc.f)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.text)
			msg := err.Error()
			require.True(t, strings.HasPrefix(msg, "ompalloc: alloc: ArrowAllocator("), "the operation first: %s", msg)
			// Issue 22: the operation once (was "ArrowAllocator(a).Free(n):
			// ArrowAllocator.Free: ..."), the sentinel once.
			require.Equal(t, 1, strings.Count(msg, "ArrowAllocator"), "%s", msg)
			require.Equal(t, 1, strings.Count(msg, tc.want.Error()), "%s", msg)
		})
	}
	// Nothing was freed or corrupted by the refused calls.
	info, err := InspectSlice(b)
	require.NoError(t, err)
	require.Equal(t, uintptr(100), info.Size)
	require.Equal(t, int64(2), a.Stats().BlocksLive)
	mem.Free(b)
	mem.Free(orig[:0:0]) // no capacity: a no-op
	require.Equal(t, int64(1), a.Stats().BlocksLive)
	mem.Free(orig)
	require.Zero(t, a.Stats().BlocksLive)
}

func TestBytesFreeThroughFallback(t *testing.T) {
	// A block the fallback served is the allocator's to free.
	a := mustNew(t, memspace.Default, WithPoolSize(1<<20), WithFallback(traits.DefaultMemFb))
	mem := NewArrowAllocator(a)
	b := mem.Allocate(2 << 20)
	info, err := InspectSlice(b)
	require.NoError(t, err)
	require.Equal(t, handle(predef.DefaultMem), info.Allocator.handle())
	require.Equal(t, uint64(1), a.Stats().Fallbacks)
	b = mem.Reallocate(3<<20, b)
	mem.Free(b)
	_, err = InspectSlice(b)
	require.True(t, errors.Is(err, ErrInvalidPointer) || errors.Is(err, ErrDoubleFree), "%v", err)
}

func TestBytesConcurrent(t *testing.T) {
	a := mustNew(t, memspace.Default)
	mem := NewArrowAllocator(a)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				n := 1 + (i*97+g*13)%5000
				b := mem.Allocate(n)
				v := byte(g*31 + i)
				for j := range b {
					b[j] = v
				}
				b = mem.Reallocate(n*2, b)
				for j := range n {
					if b[j] != v {
						panic(fmt.Sprintf("goroutine %d: byte %d of %d is %d, want %d", g, j, n, b[j], v))
					}
				}
				if indexNonZero(b[n:]) != -1 {
					panic("grown bytes are not zero")
				}
				mem.Free(b)
			}
		}()
	}
	wg.Wait()
	st := a.Stats()
	require.Zero(t, st.BlocksLive)
	require.Zero(t, st.BytesLive)
	require.Equal(t, st.Allocs, st.Frees)
	require.GreaterOrEqual(t, st.Frees, uint64(1200))
}

func TestBytesOnPinnedAllocator(t *testing.T) {
	a := mustNew(t, memspace.Default, WithPinned(true), WithFallback(traits.NullFb))
	mem := NewArrowAllocator(a)
	b := mem.Allocate(1000)
	require.True(t, target.IsPinned(b))
	require.True(t, isPinned(t, unsafe.Pointer(unsafe.SliceData(b))))
	mem.Free(b)
	plain := NewArrowAllocator(mustNew(t, memspace.Default)).Allocate(10)
	require.False(t, target.IsPinned(plain))
	info, err := InspectSlice(plain)
	require.NoError(t, err)
	NewArrowAllocator(info.Allocator).Free(plain)
}

var sinkBytes []byte

// Side by side: Bytes against the Go heap for a 4 KiB buffer, and
// Reallocate growing in place against moving.
func BenchmarkBytes(b *testing.B) {
	mem := NewArrowAllocator(Default())
	b.Run("Allocate+Free/4KiB", func(b *testing.B) {
		for range b.N {
			buf := mem.Allocate(4096)
			mem.Free(buf)
		}
	})
	b.Run("GoMake/4KiB", func(b *testing.B) {
		for range b.N {
			sinkBytes = make([]byte, 4096)
		}
	})
	b.Run("Reallocate/in-place", func(b *testing.B) {
		buf := mem.Allocate(3000)
		for i := range b.N {
			buf = mem.Reallocate(3000+i%2*1000, buf) // 3000 <-> 4000 in one 4 KiB-class slot
		}
		mem.Free(buf)
	})
	b.Run("Reallocate/grow-moves-shrink-stays", func(b *testing.B) {
		buf := mem.Allocate(3000)
		for i := range b.N {
			buf = mem.Reallocate(3000+i%2*5000, buf) // 3000 -> 8000 moves (another class); 8000 -> 3000 shrinks in place
		}
		mem.Free(buf)
	})
}

// nilInterface is an Interface whose allocations return no memory and no
// error, as a broken embedding might.
type nilInterface struct{}

func (nilInterface) Alloc(uintptr) (unsafe.Pointer, error)                 { return nil, nil }
func (nilInterface) AlignedAlloc(uintptr, uintptr) (unsafe.Pointer, error) { return nil, nil }
func (nilInterface) Calloc(uintptr, uintptr) (unsafe.Pointer, error)       { return nil, nil }
func (nilInterface) Realloc(unsafe.Pointer, uintptr) (unsafe.Pointer, error) {
	return nil, nil
}
func (nilInterface) Free(unsafe.Pointer) error { return nil }
func (nilInterface) String() string            { return "nilInterface" }

// Issue 22, item 2: an Interface that returns no memory panics with the
// operation first, the allocator named once and the sentinel last (was
// "...Allocate(8): out of memory: nilInterface returned no memory").
func TestArrowNoMemoryErrorShape(t *testing.T) {
	err := recovered(t, func() { NewArrowAllocator(nilInterface{}).Allocate(8) })
	require.ErrorIs(t, err, ErrOutOfMemory)
	msg := err.Error()
	t.Log(msg)
	require.True(t, strings.HasPrefix(msg, "ompalloc: alloc: ArrowAllocator(nilInterface).Allocate(8): "), "%s", msg)
	require.Equal(t, 1, strings.Count(msg, "nilInterface"), "the allocator named once: %s", msg)
	require.True(t, strings.HasSuffix(msg, ": "+ErrOutOfMemory.Error()), "the sentinel last: %s", msg)
}
