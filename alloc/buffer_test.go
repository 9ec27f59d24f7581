package alloc

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/warn"
	"github.com/ompalloc/ompalloc/memspace"
)

// syncWriter collects the warnings a cleanup writes from its goroutine.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	got chan struct{}
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	select {
	case w.got <- struct{}{}:
	default:
	}
	return n, err
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func withWarnings(t *testing.T) *syncWriter {
	w := &syncWriter{got: make(chan struct{}, 1)}
	restore := warn.SetOutput(w)
	t.Cleanup(func() { restore() })
	return w
}

func TestBufferFree(t *testing.T) {
	w := withWarnings(t)
	b, err := NewBuffer[float32](Default(), 1000)
	require.NoError(t, err)
	s := b.Slice()
	require.Len(t, s, 1000)
	require.Equal(t, 1000, cap(s))
	s[999] = 1.5
	require.NoError(t, b.Free())
	require.ErrorIs(t, b.Free(), ErrDoubleFree)
	b = nil
	runtime.GC()
	runtime.GC()
	require.Empty(t, w.String(), "a freed Buffer warns about nothing")
}

// The safety net: a Buffer dropped without Free warns once the collector
// finds it, and its memory stays valid (never freed behind the program's
// back).
func TestBufferSafetyNetWarns(t *testing.T) {
	w := withWarnings(t)
	a := mustNew(t, memspace.Default)
	before := a.Stats().BlocksLive
	var leaked []uint64
	func() {
		b, err := NewBuffer[uint64](a, 512)
		require.NoError(t, err)
		leaked = b.Slice() // kept on purpose: the memory must stay usable
		leaked[0] = 42
	}()
	deadline := time.Now().Add(5 * time.Second)
	for w.String() == "" && time.Now().Before(deadline) {
		runtime.GC()
		select {
		case <-w.got:
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.Contains(t, w.String(), "Buffer[uint64] of 512 elements")
	require.Contains(t, w.String(), "without Free")
	require.Equal(t, uint64(42), leaked[0], "the memory was not freed")
	require.Equal(t, before+1, a.Stats().BlocksLive)
	require.NoError(t, FreeSlice(a, leaked))
}

func TestBufferErrors(t *testing.T) {
	_, err := NewBuffer[*int](Default(), 1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	b, err := NewBuffer[byte](Default(), 0)
	require.NoError(t, err)
	require.Zero(t, b.Len())
	require.NoError(t, b.Free())
}
