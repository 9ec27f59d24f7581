package alloc

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// arrowAlignment is the alignment of every slice an ArrowAllocator returns, at
// least: Arrow's buffers assume 64 bytes (one cache line, an AVX-512
// vector). An allocator aligned more strictly keeps its own alignment.
const arrowAlignment = 64

// ArrowAllocator hands out []byte in an allocator's memory. Its method set is
// that of Apache Arrow Go's memory.Allocator, so a value plugs into every
// Arrow builder, IPC reader and compute kernel without this module
// importing Arrow:
//
//	var mem memory.Allocator = alloc.NewArrowAllocator(pinned)
//	b := array.NewFloat64Builder(mem)
//
// As Arrow's own allocators do, it returns zeroed memory, len == size
// (and cap == len), aligned to 64 bytes at least (what Arrow's buffers
// assume: a cache line, an AVX-512 vector); Allocate(0) is a valid empty
// slice; Free takes anything Allocate or Reallocate returned, also
// re-sliced to length 0 (a slice that starts where the block does).
// Reallocate keeps the block where it lies when it has room, else moves it;
// bytes beyond the old size are zero either way. The blocks count in the
// allocator's Stats like any other, and Free, Inspect and FreeSlice accept
// them.
//
// The interface has no error results, so failures panic, with an error
// value that errors.Is matches against this package's sentinels: out of
// memory (ErrOutOfMemory, ErrPinFailed, ErrPoolExhausted, after the
// allocator's fallback has had its turn), a negative size
// (ErrInvalidArgument), a destroyed allocator (ErrDestroyed), and a slice
// that did not come from this allocator or its fallbacks (ErrInvalidPointer,
// ErrDoubleFree, ErrInvalidArgument). A program that must survive running
// out recovers the panic, or gives the allocator a fallback. A
// ArrowAllocator is safe for concurrent use.
type ArrowAllocator struct {
	a *Allocator
	n *atomic.Int64 // bytes allocated through this value and its copies, not freed

	// other is an Interface that is not an *Allocator (a library's
	// wrapper, say), with the size of every block handed out through it.
	other Interface
	sizes *sync.Map // unsafe.Pointer → int
}

// NewArrowAllocator returns a's Arrow allocator; nil means the default
// allocator (as it is now: a later SetDefault does not change the
// result). a may be any Interface a library holds: an *Allocator is used
// directly; another implementation is asked for 64-byte aligned blocks
// (AlignedAlloc, zeroed here) and given them back with Free, the Arrow
// allocator keeping each block's size. Device memory that the host cannot
// touch (TargetDevice on a GPU) cannot back a []byte: Allocate panics with
// ErrNotSupported.
func NewArrowAllocator(a Interface) ArrowAllocator {
	al, ok := a.(*Allocator)
	switch {
	case a == nil || (ok && al == nil):
		al = Default()
	case !ok:
		return ArrowAllocator{n: new(atomic.Int64), other: a, sizes: new(sync.Map)}
	}
	return ArrowAllocator{a: al, n: new(atomic.Int64)}
}

// AllocatedBytes is the number of bytes this Arrow allocator (and its
// copies) handed out and has not had back, as Arrow's Mallocator and
// GoAllocator report it: what Arrow's CheckedAllocator and memory
// accounting read. Blocks of the same *Allocator allocated otherwise are
// not counted (they are in the allocator's Stats).
func (b ArrowAllocator) AllocatedBytes() int64 {
	if b.n == nil {
		return 0
	}
	return b.n.Load()
}

func (b ArrowAllocator) add(n int64) {
	if b.n != nil {
		b.n.Add(n)
	}
}

// Allocate returns size zeroed bytes (len == cap == size).
func (b ArrowAllocator) Allocate(size int) []byte {
	if size < 0 {
		panic(b.fail("Allocate", size, fmt.Errorf("%w: negative size", ErrInvalidArgument)))
	}
	if size == 0 {
		return []byte{}
	}
	if b.other != nil {
		return b.allocateOther(size)
	}
	p, err := b.a.AlignedCalloc(arrowAlignment, uintptr(size), 1)
	if err == nil && p == nil {
		err = fmt.Errorf("AlignedCalloc returned no memory and no error: %w", ErrNotSupported)
	}
	if err != nil {
		panic(b.fail("Allocate", size, err))
	}
	b.add(int64(size))
	return unsafe.Slice((*byte)(p), size)
}

// Reallocate resizes buf, which Allocate or Reallocate returned, to size
// bytes and returns the new slice; buf must not be used afterwards. The
// first min(old, size) bytes are kept, the rest are zero. An empty buf is
// Allocate(size); size 0 frees buf and returns an empty slice.
func (b ArrowAllocator) Reallocate(size int, buf []byte) []byte {
	if size < 0 {
		panic(b.fail("Reallocate", size, fmt.Errorf("%w: negative size", ErrInvalidArgument)))
	}
	if cap(buf) == 0 {
		return b.Allocate(size)
	}
	if size == 0 {
		b.Free(buf)
		return []byte{}
	}
	if b.other != nil {
		old := b.sizeOther(buf, "Reallocate", size)
		nb := b.allocateOther(size)
		copy(nb, unsafe.Slice(unsafe.SliceData(buf), min(old, size)))
		b.Free(buf)
		return nb
	}
	p := unsafe.Pointer(unsafe.SliceData(buf))
	info, err := b.owned(buf, "Reallocate", size)
	if err != nil {
		panic(failOwned(err))
	}
	moved := uintptr(size) > info.Room || uintptr(p)%arrowAlignment != 0
	if !moved {
		ok, err := resizeInPlace(p, uintptr(size))
		if err != nil {
			panic(b.fail("Reallocate", size, err))
		}
		if ok {
			b.add(int64(size) - int64(info.Size))
			return unsafe.Slice((*byte)(p), size)
		}
	}
	nb := b.Allocate(size)
	copy(nb, unsafe.Slice((*byte)(p), min(info.Size, uintptr(size))))
	if err := Free(p); err != nil {
		panic(b.fail("Reallocate", size, err))
	}
	b.add(-int64(info.Size))
	return nb
}

// Free releases buf, which Allocate or Reallocate returned (re-sliced to
// any length, as long as it starts where it did). An empty slice with no
// capacity is a no-op.
func (b ArrowAllocator) Free(buf []byte) {
	if cap(buf) == 0 {
		return
	}
	if b.other != nil {
		p := unsafe.Pointer(unsafe.SliceData(buf))
		old := b.sizeOther(buf, "Free", len(buf))
		if err := b.other.Free(p); err != nil {
			panic(b.fail("Free", len(buf), err))
		}
		b.sizes.Delete(p)
		b.add(-int64(old))
		return
	}
	info, err := b.owned(buf, "Free", len(buf))
	if err != nil {
		panic(failOwned(err))
	}
	if err := Free(unsafe.Pointer(unsafe.SliceData(buf))); err != nil {
		panic(b.fail("Free", len(buf), err))
	}
	b.add(-int64(info.Size))
}

// owned checks that buf is a block of b's allocator (or its fallbacks).
func (b ArrowAllocator) owned(buf []byte, op string, size int) (BlockInfo, error) {
	what := b.op(op, size)
	info, err := inspectSlice(unsafe.Pointer(unsafe.SliceData(buf)), what)
	if err != nil {
		return BlockInfo{}, err
	}
	if err := checkOwner(b.a, info, what); err != nil {
		return BlockInfo{}, err
	}
	return info, nil
}

func (b ArrowAllocator) fail(op string, size int, err error) error {
	return fmt.Errorf("ompalloc: alloc: %s: %w", b.op(op, size), err)
}

// op names an operation of b for its errors: ArrowAllocator(a).Free(n).
func (b ArrowAllocator) op(op string, size int) string {
	var who any = b.a
	if b.other != nil {
		who = b.other
	}
	return fmt.Sprintf("ArrowAllocator(%v).%s(%d)", who, op, size)
}

// failOwned is the panic value of owned's error, which names the
// operation already.
func failOwned(err error) error { return fmt.Errorf("ompalloc: alloc: %w", err) }

// allocateOther is Allocate through an Interface that is not an *Allocator.
func (b ArrowAllocator) allocateOther(size int) []byte {
	p, err := b.other.AlignedAlloc(arrowAlignment, uintptr(size))
	if err == nil && p == nil {
		err = fmt.Errorf("AlignedAlloc returned no memory and no error: %w", ErrOutOfMemory)
	}
	if err != nil {
		panic(b.fail("Allocate", size, err))
	}
	buf := unsafe.Slice((*byte)(p), size)
	clear(buf)
	b.sizes.Store(p, size)
	b.add(int64(size))
	return buf
}

// sizeOther is the size of a block handed out through other; anything else
// panics with ErrInvalidPointer.
func (b ArrowAllocator) sizeOther(buf []byte, op string, size int) int {
	v, ok := b.sizes.Load(unsafe.Pointer(unsafe.SliceData(buf)))
	if !ok {
		panic(b.fail(op, size, fmt.Errorf("%w: %p was not allocated by this Arrow allocator", ErrInvalidPointer, unsafe.SliceData(buf))))
	}
	return v.(int)
}
