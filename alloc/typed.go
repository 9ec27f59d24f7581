package alloc

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"
)

// Make returns a zeroed []T of length n (len == cap) in memory from a, not
// from the Go heap: appending beyond it copies to the Go heap instead of
// overrunning. T must hold no Go pointers (the garbage collector does not
// see this memory). Free it with FreeSlice.
func Make[T any](a Interface, n int) ([]T, error) {
	var zero T
	t := reflect.TypeOf(&zero).Elem()
	if n < 0 {
		return nil, fmt.Errorf("%w: Make[%v] of negative length %d", ErrInvalidArgument, t, n)
	}
	if hasPointers(t) {
		return nil, fmt.Errorf("%w: Make[%v]: the type holds Go pointers, which must not live in C memory", ErrInvalidArgument, t)
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

// FreeSlice frees a slice made by Make. An empty slice is a no-op.
func FreeSlice[T any](a Interface, s []T) error {
	if cap(s) == 0 {
		return nil
	}
	return a.Free(unsafe.Pointer(unsafe.SliceData(s)))
}

var pointerFree sync.Map // reflect.Type → bool

func hasPointers(t reflect.Type) bool {
	if v, ok := pointerFree.Load(t); ok {
		return v.(bool)
	}
	has := typeHasPointers(t)
	pointerFree.Store(t, has)
	return has
}

func typeHasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	case reflect.Array:
		return t.Len() > 0 && typeHasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if typeHasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	}
	return true
}
