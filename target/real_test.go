package target

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// realAccelerator discovers the real plugins' devices and returns the first
// accelerator, or skips when the machine has none.
func realAccelerator(tb testing.TB) *Device {
	tb.Helper()
	if os.Getenv(driversChildEnv) != "" {
		tb.Skip("in the fake drivers' child")
	}
	require.NoError(tb, Shutdown()) // rediscover with the real plugins
	tb.Cleanup(func() { require.NoError(tb, Shutdown()) })
	if NumDevices() == 0 {
		tb.Skipf("no accelerator on this machine (%d plugins report none)", len(Plugins())-1)
	}
	d, err := Get(0)
	require.NoError(tb, err)
	return d
}

// TestRealAccelerators runs the staging and pinned-path checks on every
// real accelerator (a GPU machine; skipped elsewhere).
func TestRealAccelerators(t *testing.T) {
	realAccelerator(t)
	for _, d := range Devices() {
		if d.IsHost() {
			continue
		}
		t.Run(d.String()+"/one queue, two rounds", func(t *testing.T) { manySubmissions(t, d) })
		t.Run(d.String()+"/goroutines", func(t *testing.T) { concurrentSubmissions(t, d) })
		t.Run(d.String()+"/pinned path", func(t *testing.T) { pinnedPath(t, d) })
	}
}

// BenchmarkSubmitSmall: the latency of one small asynchronous host→device
// copy and its synchronization, from pageable memory staged through the
// pool, from pageable memory handed to the driver, and from pinned memory.
func BenchmarkSubmitSmall(b *testing.B) {
	d := realAccelerator(b)
	for _, size := range []uintptr{64, 4 << 10, 64 << 10} {
		dst, err := d.Alloc(MemDevice, size)
		require.NoError(b, err)
		pageable := hostMem(b, size)
		pinnedMem, err := d.Alloc(MemHost, size)
		require.NoError(b, err)
		for _, mode := range []string{"staged", "pageable", "pinned"} {
			b.Run(fmt.Sprintf("%s/%d", mode, size), func(b *testing.B) {
				src := pageable
				cfg := defaultStagingConfig()
				switch mode {
				case "pageable":
					cfg.Threshold = 0
				case "pinned":
					src = pinnedMem
				}
				d.SetStagingConfig(cfg)
				q, err := d.NewQueue()
				require.NoError(b, err)
				defer q.Close()
				b.SetBytes(int64(size))
				for b.Loop() {
					if err := d.submit(dst, src, size, q); err != nil {
						b.Fatal(err)
					}
					if err := q.Synchronize(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		d.SetStagingConfig(defaultStagingConfig())
		require.NoError(b, d.Free(MemHost, pinnedMem))
		require.NoError(b, d.Free(MemDevice, dst))
	}
}
