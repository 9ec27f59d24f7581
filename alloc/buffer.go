package alloc

import (
	"fmt"
	"reflect"
	"runtime"
	"sync/atomic"

	"github.com/ompalloc/ompalloc/internal/warn"
)

// Buffer owns a typed slice in memory from an allocator, as Make returns,
// with a safety net: if a Buffer becomes unreachable without Free having
// been called, a warning naming its type, length and allocator is printed
// once the garbage collector notices. The net is best effort: it only
// warns, never frees (the slice may still be in use through a copy of
// Slice's result, and freeing it would turn a leak into a crash), and it
// runs only if a garbage collection finds the Buffer unreachable before the
// program exits. For a complete account use LiveBlocks and, while
// debugging, OMPALLOC_LEAKCHECK=1.
//
// A plain slice from Make has no such net: a slice header is not an object
// the collector can watch.
type Buffer[T any] struct {
	s     []T
	a     Interface
	state *bufferState
	stop  runtime.Cleanup
}

// bufferState is what the cleanup sees: never the Buffer itself (a
// cleanup that reaches its object keeps it alive forever).
type bufferState struct {
	freed atomic.Bool
	what  string
}

// NewBuffer returns a Buffer of n zeroed elements from a (see Make).
func NewBuffer[T any](a Interface, n int) (*Buffer[T], error) {
	s, err := Make[T](a, n)
	if err != nil {
		return nil, err
	}
	var zero T
	b := &Buffer[T]{s: s, a: a, state: &bufferState{
		what: fmt.Sprintf("Buffer[%v] of %d elements from %v", reflect.TypeOf(&zero).Elem(), n, a)}}
	if len(s) > 0 {
		b.stop = runtime.AddCleanup(b, warnUnfreed, b.state)
	}
	return b, nil
}

func warnUnfreed(st *bufferState) {
	if !st.freed.Load() {
		warn.Printf(warn.Unfreed, "alloc", "a %s became unreachable without Free; its memory stays allocated", st.what)
	}
}

// Slice returns the elements (len == cap). Keep the Buffer reachable while
// the slice is in use.
func (b *Buffer[T]) Slice() []T { return b.s }

// Len is the number of elements.
func (b *Buffer[T]) Len() int { return len(b.s) }

// Free releases the memory; a second Free is an error that changes nothing.
func (b *Buffer[T]) Free() error {
	if !b.state.freed.CompareAndSwap(false, true) {
		return fmt.Errorf("Free of a %s: %w", b.state.what, ErrDoubleFree)
	}
	b.stop.Stop()
	s := b.s
	b.s = nil
	return FreeSlice(b.a, s)
}
