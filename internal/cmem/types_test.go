package cmem

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHasPointers(t *testing.T) {
	type plain struct {
		A float32
		B [4]int64
	}
	type hidden struct {
		A int
		B [2]struct{ S string }
	}
	for _, tc := range []struct {
		v    any
		want bool
	}{
		{float64(0), false},
		{complex64(0), false},
		{[8]uint8{}, false},
		{plain{}, false},
		{[0]*int{}, false}, // no element, nothing to scan
		{struct{}{}, false},
		{"", true},
		{[]byte(nil), true},
		{(*int)(nil), true},
		{map[int]int(nil), true},
		{hidden{}, true},
		{[3]plain{}, false},
		{[1]hidden{}, true},
	} {
		typ := reflect.TypeOf(tc.v)
		require.Equal(t, tc.want, HasPointers(typ), "%v", typ)
		require.Equal(t, tc.want, HasPointers(typ), "%v, cached", typ)
	}
}
