package alloc

import (
	"fmt"
	"math/bits"
	"reflect"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
)

// Make returns a zeroed []T of length n (len == cap) in memory from a, not
// from the Go heap: appending beyond it copies to the Go heap instead of
// overrunning. T must hold no Go pointers (the garbage collector does not
// see this memory). Free it with FreeSlice.
func Make[T any](a Interface, n int) ([]T, error) {
	var zero T
	t := reflect.TypeOf(&zero).Elem()
	if n < 0 {
		return nil, fmt.Errorf("Make[%v]: %w: negative length %d", t, ErrInvalidArgument, n)
	}
	if cmem.HasPointers(t) {
		return nil, fmt.Errorf("Make[%v]: %w: the type holds Go pointers, which must not live in C memory", t, ErrInvalidArgument)
	}
	if n == 0 || unsafe.Sizeof(zero) == 0 {
		return nil, nil
	}
	p, err := a.Calloc(uintptr(n), unsafe.Sizeof(zero))
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*T)(p), n), nil
}

// FreeSlice frees a slice made by Make (or Resize) from a. The slice may be
// re-sliced to a shorter length, but must start where Make's did: a slice
// re-sliced from further in, or grown by append (which copies it to the Go
// heap), is an error (ErrInvalidPointer) that says so and frees nothing, as
// is a slice from an allocator other than a or its fallbacks
// (ErrInvalidArgument) and one already freed (ErrDoubleFree). An empty
// slice is a no-op. For an Interface that is not an *Allocator, FreeSlice
// is a.Free of the first element.
func FreeSlice[T any](a Interface, s []T) error {
	if cap(s) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(s))
	al, ok := a.(*Allocator)
	if !ok {
		return a.Free(p)
	}
	what := "FreeSlice[" + typeName[T]() + "]"
	info, err := inspectSlice(p, what)
	if err != nil {
		return err
	}
	if err := checkOwner(al, info, what); err != nil {
		return err
	}
	if err := Free(p); err != nil {
		return sliceError(what, err) // lost a race with another Free of s
	}
	return nil
}

// Resize returns s, a slice made by Make or Resize from a, resized to n
// elements (len == cap == n): the first min(len, n) elements kept, the
// rest zero. The block stays where it lies when it has room (see
// BlockInfo.Room), else moves into a new block from a (as Realloc does), and
// s must not be used afterwards. n == 0 frees s and returns nil; an empty s
// is Make(a, n). On error s is untouched and still valid. The checks on s
// are FreeSlice's.
func Resize[T any](a *Allocator, s []T, n int) ([]T, error) {
	var zero T
	what := "Resize[" + typeName[T]() + "]"
	if n < 0 {
		return nil, fmt.Errorf("%s: %w: negative length %d", what, ErrInvalidArgument, n)
	}
	if cap(s) == 0 {
		return Make[T](a, n)
	}
	if n == 0 {
		return nil, FreeSlice(a, s)
	}
	sz := unsafe.Sizeof(zero)
	hi, nb := bits.Mul64(uint64(n), uint64(sz))
	if hi != 0 || uint64(uintptr(nb)) != nb {
		return nil, fmt.Errorf("%s: %w: %d elements of %d bytes", what, ErrOverflow, n, sz)
	}
	p := unsafe.Pointer(unsafe.SliceData(s))
	info, err := inspectSlice(p, what)
	if err != nil {
		return nil, err
	}
	if err := checkOwner(a, info, what); err != nil {
		return nil, err
	}
	if uintptr(nb) <= info.Room {
		ok, err := resizeInPlace(p, uintptr(nb))
		if err != nil {
			return nil, sliceError(what, err)
		}
		if ok {
			return unsafe.Slice((*T)(p), n), nil
		}
	}
	np, err := a.alloc(uintptr(nb), 0, true)
	if err != nil {
		return nil, err
	}
	cmem.Copy(uintptr(np), uintptr(p), min(info.Size, uintptr(nb)))
	if err := Free(p); err != nil {
		_ = Free(np)
		return nil, sliceError(what, err)
	}
	return unsafe.Slice((*T)(np), n), nil
}
