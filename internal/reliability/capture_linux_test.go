package reliability

import (
	"io"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

var captureMu sync.Mutex

// captureStderr runs f with file descriptor 2 redirected to a pipe and
// returns what was written there: the runtime's warnings go to the stderr
// it saw at start, so only redirecting the descriptor catches them.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	captureMu.Lock()
	defer captureMu.Unlock()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved, err := syscall.Dup(2)
	require.NoError(t, err)
	require.NoError(t, syscall.Dup3(int(w.Fd()), 2, 0))
	var out []byte
	done := make(chan struct{})
	go func() { out, _ = io.ReadAll(r); close(done) }()
	func() {
		defer func() {
			_ = syscall.Dup3(saved, 2, 0)
			_ = syscall.Close(saved)
			_ = w.Close()
		}()
		f()
	}()
	<-done
	_ = r.Close()
	return string(out)
}
