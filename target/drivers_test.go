package target

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

const driversChildEnv = "OMPALLOC_TARGET_DRIVERS_CHILD"

// TestFakeDrivers runs TestFakeDriversChild in a child process whose CUDA
// and HSA plugins load the fake C drivers (2 NVIDIA, 2 AMD devices, copies
// performed late by driver threads): the drivers' state is per process.
func TestFakeDrivers(t *testing.T) {
	if os.Getenv(driversChildEnv) != "" {
		t.Skip("in the child")
	}
	cudaLib := fakedrv.Build(t, "fakecuda")
	hsaLib := fakedrv.Build(t, "fakehsa")
	cmd := exec.Command(os.Args[0], "-test.run=^TestFakeDriversChild$", "-test.v", "-test.timeout=120s")
	cmd.Env = append(os.Environ(),
		driversChildEnv+"=1",
		"OMPALLOC_CUDA_LIBRARY="+cudaLib, "FAKECUDA_DEVICES=2", "FAKECUDA_COPY_DELAY_US=30",
		"OMPALLOC_HSA_LIBRARY="+hsaLib, "FAKEHSA_GPUS=2", "FAKEHSA_COPY_DELAY_US=30",
	)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestFakeDriversChild", "%s", out)
	t.Logf("%s", out)
}

// hook returns a test hook of an already loaded fake driver.
func hook(t *testing.T, lib, name string) uintptr {
	t.Helper()
	l, err := dl.Open(dl.Spec{Name: "fake driver", Candidates: []string{lib}})
	require.NoError(t, err)
	p, err := l.Sym(name)
	require.NoError(t, err)
	return p
}

// readBack copies n bytes of device memory p back to a fresh host buffer.
func readBack(t *testing.T, d *Device, p, n uintptr) uintptr {
	t.Helper()
	h := hostMem(t, n)
	require.NoError(t, d.retrieve(h, p, n, nil))
	return h
}

func TestFakeDriversChild(t *testing.T) {
	if os.Getenv(driversChildEnv) == "" {
		t.Skip("run by TestFakeDrivers")
	}
	require.Equal(t, 4, NumDevices())
	var names []string
	for _, d := range Devices() {
		names = append(names, d.Plugin())
	}
	require.Equal(t, []string{"cuda", "cuda", "amdgpu", "amdgpu", "host"}, names, "CUDA devices, AMD GPUs, then the host")
	for _, s := range Plugins() {
		require.NoError(t, s.Err, "%s: %s", s.Plugin, s.Init)
	}

	for dev := range NumDevices() {
		d, err := Get(dev)
		require.NoError(t, err)
		t.Run(d.String()+"/one queue, two rounds", func(t *testing.T) { manySubmissions(t, d) })
		t.Run(d.String()+"/goroutines", func(t *testing.T) { concurrentSubmissions(t, d) })
		t.Run(d.String()+"/pinned path", func(t *testing.T) { pinnedPath(t, d) })
	}

	t.Run("memcpy across vendors", func(t *testing.T) {
		const n = 1 << 20
		src := hostMem(t, n)
		fill(src, n, 42)
		var ptrs []uintptr
		for dev := range NumDevices() {
			d, _ := Get(dev)
			p, err := d.Alloc(MemDevice, n)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, d.Free(MemDevice, p)) })
			ptrs = append(ptrs, p)
		}
		host := InitialDevice()
		require.NoError(t, Memcpy(ptrs[0], src, n, 0, host))
		for i := 1; i < len(ptrs); i++ {
			require.NoError(t, Memcpy(ptrs[i], ptrs[i-1], n, i, i-1), "device %d to %d", i-1, i)
		}
		back := hostMem(t, n)
		require.NoError(t, Memcpy(back, ptrs[len(ptrs)-1], n, host, len(ptrs)-1))
		require.True(t, hasFill(back, n, 42))
	})

	t.Run("AMD with SVM: copies from locked memory lock nothing again", func(t *testing.T) {
		// ROCm locking through the KFD SVM API: pointer info says UNKNOWN.
		t.Setenv("FAKEHSA_SVM", "1")
		const n = 1 << 16
		count := hook(t, os.Getenv("OMPALLOC_HSA_LIBRARY"), "fakehsa_count")
		lockCalls := func() uintptr {
			b := append([]byte("lock_calls"), 0)
			return dlcall.Call(count, uintptr(unsafePointer(b)))
		}
		d2, _ := Get(2)
		d3, _ := Get(3)
		h := hostMem(t, n)
		_, err := d2.LockMem(h, n)
		require.NoError(t, err)
		calls := lockCalls()
		_, err = d3.LockMem(h+4096, 4096)
		require.NoError(t, err, "inside device 2's lock: a reference, not a refused second lock")
		dev, err := d2.Alloc(MemDevice, n)
		require.NoError(t, err)
		q, err := d2.NewQueue()
		require.NoError(t, err)
		fill(h+100, 1000, 91)
		require.NoError(t, d2.submit(dev, h+100, 1000, q))
		require.NoError(t, q.Synchronize(context.Background()))
		clearMem(h+100, 1000)
		require.NoError(t, d2.retrieve(h+100, dev, 1000, q))
		require.NoError(t, q.Synchronize(context.Background()))
		require.True(t, hasFill(h+100, 1000, 91))
		require.Equal(t, calls, lockCalls(), "no hsa_amd_memory_lock for copies of locked memory")
		require.NoError(t, q.Close())
		require.NoError(t, d2.Free(MemDevice, dev))
		require.NoError(t, d3.UnlockMem(h+4096))
		require.NoError(t, d2.UnlockMem(h))
	})

	t.Run("AMD: a copy starting in a locked prefix runs past its end", func(t *testing.T) {
		const n, locked = 1 << 17, 1 << 12 // larger than the staging threshold
		d2, _ := Get(2)
		h := hostMem(t, n)
		_, err := d2.LockMem(h, locked)
		require.NoError(t, err)
		dev, err := d2.Alloc(MemDevice, n)
		require.NoError(t, err)
		q, err := d2.NewQueue()
		require.NoError(t, err)
		fill(h, n, 93)
		require.NoError(t, d2.submit(dev, h, n, nil))
		require.NoError(t, d2.submit(dev, h, n, q))
		require.NoError(t, q.Synchronize(context.Background()))
		clearMem(h, n)
		require.NoError(t, d2.retrieve(h, dev, n, q))
		require.NoError(t, q.Synchronize(context.Background()))
		require.True(t, hasFill(h, n, 93))
		require.NoError(t, q.Close())
		require.NoError(t, d2.Free(MemDevice, dev))
		require.NoError(t, d2.UnlockMem(h))
	})

	t.Run("memcpy between the two AMD GPUs goes device to device", func(t *testing.T) {
		const n = 1 << 20
		count := hook(t, os.Getenv("OMPALLOC_HSA_LIBRARY"), "fakehsa_count")
		copies := func() uintptr {
			b := append([]byte("copies"), 0)
			return dlcall.Call(count, uintptr(unsafePointer(b)))
		}
		d2, _ := Get(2)
		d3, _ := Get(3)
		src := hostMem(t, n)
		fill(src, n, 77)
		a, err := d2.Alloc(MemDevice, n)
		require.NoError(t, err)
		defer func() { require.NoError(t, d2.Free(MemDevice, a)) }()
		b, err := d3.Alloc(MemDevice, n)
		require.NoError(t, err)
		defer func() { require.NoError(t, d3.Free(MemDevice, b)) }()
		require.NoError(t, Memcpy(a, src, n, 2, InitialDevice()))
		before := copies()
		require.NoError(t, Memcpy(b, a, n, 3, 2))
		require.Equal(t, before+1, copies(), "one hsa_amd_memory_async_copy between the agents, no bounce through the host")
		require.True(t, hasFill(readBack(t, d3, b, n), n, 77))
	})

	require.NoError(t, Shutdown())
	live := hook(t, os.Getenv("OMPALLOC_CUDA_LIBRARY"), "fakecuda_live")
	require.Zero(t, dlcall.Call(live, 2), "CUDA host allocations (staging buffers) left")
	require.Zero(t, dlcall.Call(live, 3), "CUDA registrations left")
	require.Zero(t, dlcall.Call(live, 4), "CUDA streams left")
	count := hook(t, os.Getenv("OMPALLOC_HSA_LIBRARY"), "fakehsa_count")
	for _, what := range []string{"allocs", "locks", "pending"} {
		b := append([]byte(what), 0)
		require.Zero(t, dlcall.Call(count, uintptr(unsafePointer(b))), "HSA %s left", what)
	}
}

// manySubmissions is the PR's first test on a real plugin over a fake
// driver: one queue, never synchronized, two rounds.
func manySubmissions(t *testing.T, d *Device) {
	const n, size = 64, 300
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	src := hostMem(t, size)
	dsts := make([]uintptr, n)
	for i := range dsts {
		dsts[i], err = d.Alloc(MemDevice, size)
		require.NoError(t, err)
	}
	before := d.StagingStats()
	for round := range 2 {
		submitRound(t, d, q, src, dsts, size, round)
		waitIdle(t, q)
		for i, dst := range dsts {
			require.True(t, hasFill(readBack(t, d, dst, size), size, round*1000+i), "round %d: destination %d", round, i)
		}
	}
	s := d.StagingStats()
	require.Equal(t, uint64(2*n), s.Hits+s.Misses-before.Hits-before.Misses, "every submission was staged")
	require.LessOrEqual(t, s.Misses-before.Misses, uint64(n), "the second round reused the first round's buffers")
	require.Equal(t, uintptr(0), s.InUseBytes)
	for _, p := range dsts {
		require.NoError(t, d.Free(MemDevice, p))
	}
}

// concurrentSubmissions is the PR's second test: several goroutines submit,
// synchronize and query on shared queues.
func concurrentSubmissions(t *testing.T, d *Device) {
	const goroutines, per, size = 4, 25, 1000
	qs := make([]*Queue, 2)
	for i := range qs {
		var err error
		qs[i], err = d.NewQueue()
		require.NoError(t, err)
	}
	dsts := make([][]uintptr, goroutines)
	for g := range dsts {
		for range per {
			p, err := d.Alloc(MemDevice, size)
			require.NoError(t, err)
			dsts[g] = append(dsts[g], p)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*goroutines*per)
	for g := range goroutines {
		src := hostMem(t, size)
		wg.Go(func() {
			for i, dst := range dsts[g] {
				q := qs[(g+i)%len(qs)]
				fill(src, size, g*per+i)
				errs <- d.submit(dst, src, size, q)
				switch i % 5 {
				case 1:
					errs <- q.Synchronize(context.Background())
				case 3:
					_, err := q.Query()
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, q := range qs {
		require.NoError(t, q.Synchronize(context.Background()))
		require.NoError(t, q.Close())
	}
	for g := range dsts {
		for i, dst := range dsts[g] {
			require.True(t, hasFill(readBack(t, d, dst, size), size, g*per+i), "goroutine %d, submission %d", g, i)
			require.NoError(t, d.Free(MemDevice, dst))
		}
	}
	require.Equal(t, uintptr(0), d.StagingStats().InUseBytes)
}

// pinnedPath: memory locked for the device, or allocated by it as host
// memory, is copied without staging, asynchronously, and reads right.
func pinnedPath(t *testing.T, d *Device) {
	const n = 8192
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	dst, err := d.Alloc(MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(MemDevice, dst)) }()

	locked := hostMem(t, n)
	_, err = d.LockMem(locked, n)
	require.NoError(t, err)
	hostAlloc, err := d.Alloc(MemHost, n)
	require.NoError(t, err)
	for i, src := range []uintptr{locked, hostAlloc} {
		before := d.StagingStats()
		fill(src, n, 7+i)
		require.NoError(t, d.submit(dst, src, n, q))
		require.NoError(t, q.Synchronize(context.Background()))
		require.Equal(t, before.Hits+before.Misses, d.StagingStats().Hits+d.StagingStats().Misses, "not staged")
		require.True(t, hasFill(readBack(t, d, dst, n), n, 7+i))
		// And back into the pinned buffer, asynchronously.
		clearMem(src, n)
		require.NoError(t, d.retrieve(src, dst, n, q))
		require.NoError(t, q.Synchronize(context.Background()))
		require.True(t, hasFill(src, n, 7+i))
	}
	require.NoError(t, d.UnlockMem(locked))
	require.NoError(t, d.Free(MemHost, hostAlloc))
	require.Zero(t, d.Registry().Stats().Entries)
}
