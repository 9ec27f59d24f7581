package cmem

import (
	"reflect"
	"sync"
)

var pointerFree sync.Map // reflect.Type → bool

// HasPointers reports whether values of t hold Go pointers (pointers,
// strings, slices, maps, channels, funcs, interfaces, at any depth). Such
// values must not live in C or device memory: the garbage collector does
// not scan it. The answer is cached per type.
func HasPointers(t reflect.Type) bool {
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
