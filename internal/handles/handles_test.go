package handles

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestLive resolves the handles Live must answer: a live entry, a stale
// generation, a destroyed one, the null handle, out of range.
func TestLive(t *testing.T) {
	old := Table()
	t.Cleanup(func() { Publish(old) })

	live := &Head{Handle: 1024 | 3<<16}
	dead := &Head{Handle: 1025}
	dead.Destroyed.Store(true)
	tab := make([]*Head, 1100)
	tab[1024], tab[1025] = live, dead

	Publish(nil)
	require.Nil(t, Live(live.Handle), "before Publish")
	Publish(tab)
	require.Equal(t, unsafe.Pointer(live), Live(live.Handle))
	for _, tc := range []struct {
		name string
		h    uintptr
	}{
		{"older generation", 1024 | 2<<16},
		{"destroyed", 1025},
		{"null", 0},
		{"empty entry", 1026},
		{"past the table", 2000},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Nil(t, Live(tc.h)) })
	}
	require.Len(t, Table(), 1100)
}

// TestPublishLongTable: a table longer than the numbers (alloc doubles its
// length when it grows) publishes only its numbers' entries; the slots past
// Mask, always nil, do not clear the entries of the numbers below.
func TestPublishLongTable(t *testing.T) {
	old := Table()
	t.Cleanup(func() { Publish(old) })
	e := &Head{Handle: 5}
	tab := make([]*Head, 70000)
	tab[5] = e
	Publish(tab)
	require.Equal(t, unsafe.Pointer(e), Live(5))
	Publish(append([]*Head(nil), tab...)) // republished whole: still there
	require.Equal(t, unsafe.Pointer(e), Live(5))
}
