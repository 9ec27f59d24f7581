package alloc

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/heap"
)

// BlockInfo describes a live block: what Inspect and InspectSlice return.
type BlockInfo struct {
	// Allocator is the allocator whose Stats count the block: the one
	// asked, or the fallback that served it.
	Allocator *Allocator
	// Size is the size of the block in bytes: as asked, or as last resized.
	Size uintptr
	// Room is the bytes usable where the block lies: Resize and
	// ArrowAllocator.Reallocate grow into it without copying. 0 for target memory,
	// which never grows in place.
	Room uintptr
}

// Inspect describes the live block that starts at p. Pointers this runtime
// did not return, pointers inside a block and freed blocks are errors
// (ErrInvalidPointer, ErrDoubleFree).
func Inspect(p unsafe.Pointer) (BlockInfo, error) {
	b, room, err := heap.Room(uintptr(p))
	if err != nil {
		if errors.Is(err, heap.ErrForeign) {
			if v, ok := targetBlocks.Load(uintptr(p)); ok {
				tb := v.(targetBlock)
				return BlockInfo{Allocator: tb.a, Size: tb.size}, nil
			}
		}
		return BlockInfo{}, opPointerError("Inspect", p, err)
	}
	return BlockInfo{Allocator: owner(b.Owner), Size: b.Size, Room: room}, nil
}

// InspectSlice describes the block behind a slice from Make (or Resize):
// Inspect of its first element. The slice must start where the block
// does; an empty slice has no block (ErrInvalidArgument).
func InspectSlice[T any](s []T) (BlockInfo, error) {
	if cap(s) == 0 {
		return BlockInfo{}, fmt.Errorf("InspectSlice[%v]: %w: an empty slice has no block", typeName[T](), ErrInvalidArgument)
	}
	return inspectSlice(unsafe.Pointer(unsafe.SliceData(s)), "InspectSlice["+typeName[T]()+"]")
}

// inspectSlice is Inspect for the start of a slice; what names the call
// for messages ("FreeSlice[float32]").
func inspectSlice(p unsafe.Pointer, what string) (BlockInfo, error) {
	info, err := Inspect(p)
	if err != nil {
		return BlockInfo{}, sliceError(what, err)
	}
	return info, nil
}

// opPointerError is the error of op(p) for the heap's error err, in Go's
// order and each sentinel said once: "Free(0x...): block already freed",
// "Free(0x...): invalid pointer: pointer was not allocated by this runtime"
// (the heap's own text repeats the address). It matches ErrInvalidPointer
// or ErrDoubleFree, and the heap's sentinel, with errors.Is.
func opPointerError(op string, p unsafe.Pointer, err error) error {
	cause := err
	for _, s := range []error{heap.ErrDoubleFree, heap.ErrForeign, heap.ErrInvalid} {
		if errors.Is(err, s) {
			cause = s
			break
		}
	}
	if errors.Is(err, heap.ErrDoubleFree) {
		return &opError{msg: fmt.Sprintf("%s(%p): %v", op, p, cause), errs: []error{err}}
	}
	return &opError{msg: fmt.Sprintf("%s(%p): %v: %v", op, p, ErrInvalidPointer, cause), errs: []error{ErrInvalidPointer, err}}
}

// opError is an error with its own one-line message over the chains it
// wraps (for errors.Is).
type opError struct {
	msg  string
	errs []error
}

func (e *opError) Error() string   { return e.msg }
func (e *opError) Unwrap() []error { return e.errs }

// sliceError explains a bad slice in a user's terms, in Go's order (the
// operation, then the cause): a slice inside a block was re-sliced from
// further in; a slice in memory no heap of ompalloc mapped never came from
// ompalloc (Go heap memory: the copy append made, or a slice a library
// allocated).
func sliceError(what string, err error) error {
	switch {
	case errors.Is(err, heap.ErrDoubleFree):
		return fmt.Errorf("%s: %w", what, ErrDoubleFree)
	case errors.Is(err, heap.ErrForeign):
		return fmt.Errorf("%s: %w: the slice's memory never came from ompalloc (Go heap memory, such as the copy append makes or a slice a library allocated)",
			what, ErrInvalidPointer)
	case errors.Is(err, heap.ErrInvalid):
		return fmt.Errorf("%s: %w: the slice does not start where its block does (re-sliced from further in): free the slice Make returned",
			what, ErrInvalidPointer)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// checkOwner reports an error unless the block info describes was served
// for a: by a itself or by an allocator on its fallback chain.
func checkOwner(a *Allocator, info BlockInfo, what string) error {
	for f, depth := a, 0; f != nil && depth <= 64; f, depth = f.fb, depth+1 {
		if f == info.Allocator {
			return nil
		}
	}
	return fmt.Errorf("%s: %w: the memory came from %v, not from %v: free it with the allocator that made it",
		what, ErrInvalidArgument, info.Allocator, a)
}

// resizeInPlace grows or shrinks the heap block at p to size where it lies,
// zeroing bytes beyond its old size, and counts the change in its
// allocator's Stats. It reports false, changing nothing, when the block has
// no room (or is target memory). The footprint does not change, nor does
// the pool_size charge (see settlePool).
func resizeInPlace(p unsafe.Pointer, size uintptr) (bool, error) {
	old, ok, err := heap.Resize(uintptr(p), size)
	if err != nil {
		if errors.Is(err, heap.ErrForeign) && isTarget(p) {
			return false, nil
		}
		return false, opPointerError("Resize", p, err)
	}
	if !ok {
		return false, nil
	}
	a := owner(old.Owner) // its footprint, and so its pool_size charge, is unchanged
	if size > old.Size {
		cmem.Zero(uintptr(p)+old.Size, size-old.Size)
	}
	if a != nil {
		a.shards.t.Resize(int64(old.Size), int64(size))
	}
	if leakCheck.Load() {
		leakResized(p, size)
	}
	return true, nil
}

func typeName[T any]() string {
	var zero T
	return fmt.Sprintf("%T", zero)
}

// leakResized keeps a leak-check record's size true after an in-place
// resize (the stack stays the allocation's).
func leakResized(p unsafe.Pointer, size uintptr) {
	if v, ok := leakStacks.Load(uintptr(p)); ok {
		r := *v.(*leakRecord)
		r.size = size
		leakStacks.Store(uintptr(p), &r)
	}
}
