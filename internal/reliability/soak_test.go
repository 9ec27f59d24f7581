package reliability

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/leakcheck"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// SoakDurationEnv sets how long the soak runs (a Go duration; CI sets
// 30s). Unset, it runs 3 s so that `go test ./...` stays quick; -short
// caps it at 1 s and the race detector at a third of it (at least 1 s).
const SoakDurationEnv = "SOAK_DURATION"

func soakDuration(t *testing.T) time.Duration {
	d := 3 * time.Second
	if v := os.Getenv(SoakDurationEnv); v != "" {
		var err error
		d, err = time.ParseDuration(v)
		require.NoError(t, err, "%s=%q", SoakDurationEnv, v)
	}
	if testing.Short() {
		d = min(d, time.Second)
	}
	if raceEnabled {
		d = max(d/3, time.Second)
	}
	return d
}

// soakCounts are the operations the soak completed, by kind.
type soakCounts struct {
	allocs, frees, reallocs, failures, fallbacks atomic.Int64
	locks, sharedLocks, transfers, checks        atomic.Int64
	pinLocks, trims, shutdowns, exactChecks      atomic.Int64
	misaligned                                   atomic.Int64 // fallback blocks without the allocator's alignment
}

func (c *soakCounts) total() int64 {
	return c.allocs.Load() + c.frees.Load() + c.reallocs.Load() + c.locks.Load() + c.sharedLocks.Load() + c.transfers.Load() +
		c.pinLocks.Load() + c.trims.Load() + c.shutdowns.Load()
}

func (c *soakCounts) String() string {
	return fmt.Sprintf("%d operations: %d allocs (%d refused by a null_fb quota or limit, %d served by a fallback), "+
		"%d frees, %d reallocs, %d private lock/unlock rounds, %d shared lock/unlock pairs, %d transfers, "+
		"%d user lock/unlock pairs on pinned blocks, %d trims, %d refused shutdowns; %d invariant sweeps, %d exact (quiescent) VmLck/registry/Stats checks",
		c.total(), c.allocs.Load(), c.failures.Load(), c.fallbacks.Load(), c.frees.Load(), c.reallocs.Load(),
		c.locks.Load(), c.sharedLocks.Load(), c.transfers.Load(), c.pinLocks.Load(), c.trims.Load(), c.shutdowns.Load(),
		c.checks.Load(), c.exactChecks.Load())
}

type soakBlock struct {
	p     unsafe.Pointer
	size  uintptr
	align uintptr
	seed  byte
}

// soakAlloc is one allocator of the soak and what its failures may be.
type soakAlloc struct {
	name     string
	a        *alloc.Allocator
	align    uintptr
	mayFail  bool // null_fb under a quota or the pinned limit
	isPinned bool
}

// soak runs workers goroutines for d on dev (the host, or a fake GPU in a
// child): alloc/calloc/aligned alloc/realloc/free on pinned and unpinned
// allocators, pooled ones with fallbacks, lock/unlock of private ranges
// (reference counts checked exactly) and of sub-ranges of one shared
// locked range, and transfers, with invariants checked continuously by a
// checker goroutine and by the workers, and everything back to baseline
// at the end.
func soak(t *testing.T, dev *target.Device, workers int, d time.Duration) *soakCounts {
	base := snapshot()
	baseVmLck := vmLck()
	exact := leakcheck.Start() // VmLck, registries and pinned Stats agree whenever nothing is in flight
	oldLimit := alloc.SetPinnedLimit(base.PinnedUsed + 48<<20)
	defer alloc.SetPinnedLimit(oldLimit)

	mk := func(name string, mayFail, pinnedA bool, align uintptr, opts ...alloc.Option) soakAlloc {
		a, err := alloc.New(memspace.Default, opts...)
		require.NoError(t, err, name)
		return soakAlloc{name: name, a: a, align: max(align, 16), mayFail: mayFail, isPinned: pinnedA}
	}
	pinnedFb := mk("pinned,default_mem_fb", false, true, 64, alloc.WithPinned(true), alloc.WithAlignment(64), alloc.WithFallback(traits.DefaultMemFb))
	allocs := []soakAlloc{
		{name: "omp_default_mem_alloc", a: alloc.Default(), align: 16},
		mk("alignment=256", false, false, 256, alloc.WithAlignment(256), alloc.WithFallback(traits.NullFb)),
		pinnedFb,
		mk("pinned,null_fb", true, true, 16, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb)),
		mk("pool=1M,default_mem_fb", false, false, 16, alloc.WithPoolSize(1<<20)),
		mk("pool=512K,null_fb", true, false, 16, alloc.WithPoolSize(512<<10), alloc.WithFallback(traits.NullFb)),
		mk("pool=256K,allocator_fb(pinned)", false, false, 16, alloc.WithPoolSize(256<<10), alloc.WithFallbackAllocator(pinnedFb.a)),
	}
	defer func() {
		for _, sa := range allocs[1:] {
			require.NoError(t, sa.a.Destroy(), sa.name)
		}
	}()

	// The shared range: locked once here; the workers lock sub-ranges of it,
	// which only add references.
	const sharedSize, privSize = 1 << 20, 64 << 10
	shared := hostBuf(t, sharedSize)
	_, err := dev.LockMem(shared, sharedSize)
	require.NoError(t, err)
	var sharedHeld atomic.Int64 // references the workers hold now

	var counts soakCounts
	// Workers hold pause for reading during each operation; the checker
	// takes it for writing to see a quiescent runtime and check it exactly.
	var pause sync.RWMutex
	stop := make(chan struct{})
	var failed atomic.Bool
	var wg sync.WaitGroup
	report := func(format string, args ...any) {
		if failed.CompareAndSwap(false, true) {
			t.Errorf(format, args...)
		}
	}

	// The checker: invariants that must hold at every instant.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			st := alloc.ReadPinnedStats()
			max, used1 := st.Limit, st.Used
			if max != 0 && used1 > max {
				report("pinned bytes %d above the limit %d", used1, max)
			}
			lck := vmLck()
			used2 := alloc.ReadPinnedStats().Used
			// Locked memory: pinned chunks, the shared range, the workers'
			// private ranges, with slack for chunks between the two reads.
			bound := (max2(used1, used2)-base.PinnedUsed+sharedSize+uintptr(workers)*privSize)/1024 + 8<<10
			if lck > baseVmLck && uintptr(lck-baseVmLck) > bound {
				report("VmLck %d kB exceeds what the runtime locked (%d kB above the %d kB baseline)", lck, bound, baseVmLck)
			}
			e, ok := dev.Registry().Entry(shared)
			if !ok {
				report("the shared locked range left the registry")
			} else if e.Refs < 1 || int64(e.Refs) > 1+int64(workers) {
				report("the shared range has %d references; the model allows 1..%d (%d held now)", e.Refs, 1+workers, sharedHeld.Load())
			}
			counts.checks.Add(1)
			if counts.checks.Load()%10 == 0 {
				pause.Lock()
				err := exact.Consistent()
				pause.Unlock()
				if err != nil {
					report("quiescent check: %v", err)
				}
				counts.exactChecks.Add(1)
			}
		}
	}()

	deadline := time.Now().Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			priv := hostBuf(t, privSize)
			var devBuf uintptr
			var q *target.Queue
			if !dev.IsHost() {
				pause.RLock()
				var err error
				devBuf, err = dev.Alloc(plugin.MemDevice, 64<<10)
				if err == nil {
					q, err = dev.NewQueue()
				}
				pause.RUnlock()
				if err != nil {
					report("device buffer or queue: %v", err)
					return
				}
			}
			var live []soakBlock
			seed := byte(w * 37)
			check := func(b soakBlock) bool {
				if !blockHolds(bytesAt(b.p, b.size), b.seed) {
					report("worker %d: block %p (%d bytes) was changed", w, b.p, b.size)
					return false
				}
				return true
			}
			size := func() uintptr {
				switch x := r.IntN(100); {
				case x < 70:
					return uintptr(1 + r.IntN(512))
				case x < 95:
					return uintptr(512 + r.IntN(64<<10))
				case x < 99:
					return uintptr(64<<10 + r.IntN(960<<10))
				default:
					return uintptr(2<<20 + r.IntN(1<<20))
				}
			}
			// Every operation that may lock or unlock memory runs inside
			// pause (for reading): the quiescent check walks the registry,
			// then reads VmLck, and an unlock between the two is a false
			// failure. So step, pinnedStep (whose Trim and refused Shutdown
			// give idle pinned chunks back) and the final frees.
			step := func() {
				pause.RLock()
				defer pause.RUnlock()
				switch op := r.IntN(100); {
				case op < 50 && len(live) < 64: // alloc, calloc, aligned alloc
					sa := allocs[r.IntN(len(allocs))]
					n := size()
					align := sa.align
					var p unsafe.Pointer
					var err error
					switch r.IntN(3) {
					case 0:
						p, err = sa.a.Alloc(n)
					case 1:
						p, err = sa.a.Calloc(n, 1)
						if err == nil && !blockIsZero(bytesAt(p, n)) {
							report("calloc on %s: not zeroed", sa.name)
						}
					default:
						al := uintptr(1) << (4 + r.IntN(9))
						align = max(align, al)
						p, err = sa.a.AlignedAlloc(al, n)
					}
					counts.allocs.Add(1)
					if err != nil {
						if !sa.mayFail {
							report("alloc of %d on %s: %v", n, sa.name, err)
						}
						counts.failures.Add(1)
						return
					}
					if uintptr(p)%align != 0 {
						if o, err := allocOwner(p); err == nil && o != sa.a && uintptr(p)%max(16, o.Traits().Alignment) == 0 {
							// Served by the fallback with the fallback's own
							// alignment: a known defect of alloc, reported.
							counts.misaligned.Add(1)
						} else {
							report("alloc on %s: %p not aligned to %d", sa.name, p, align)
						}
					}
					if o, err := allocOwner(p); err != nil {
						report("owner of a new block: %v", err)
					} else if o != sa.a {
						counts.fallbacks.Add(1) // served by the fallback
					}
					seed++
					markBlock(bytesAt(p, n), seed)
					live = append(live, soakBlock{p, n, align, seed})
				case op < 70 && len(live) > 0: // free
					k := r.IntN(len(live))
					b := live[k]
					live[k] = live[len(live)-1]
					live = live[:len(live)-1]
					check(b)
					if err := allocs[r.IntN(len(allocs))].a.Free(b.p); err != nil {
						report("free: %v", err)
					}
					counts.frees.Add(1)
				case op < 80 && len(live) > 0: // realloc, maybe into another allocator
					k := r.IntN(len(live))
					b := live[k]
					sa := allocs[r.IntN(len(allocs))]
					n := size()
					np, err := sa.a.Realloc(b.p, n)
					counts.reallocs.Add(1)
					if err != nil {
						if !sa.mayFail {
							report("realloc to %d on %s: %v", n, sa.name, err)
						}
						check(b) // the old block is intact
						return
					}
					kept := min(b.size, n, 4096)
					if !holds(bytesAt(np, kept), b.seed) {
						report("realloc lost data")
					}
					seed++
					markBlock(bytesAt(np, n), seed)
					live[k] = soakBlock{np, n, sa.align, seed}
				case op < 86: // private range: k locks, refs == k, k unlocks
					k := 1 + r.IntN(3)
					off := uintptr(r.IntN(4)) * 4096
					for range k {
						if _, err := dev.LockMem(priv+off, privSize-off); err != nil {
							report("lock private: %v", err)
						}
					}
					if e, ok := dev.Registry().Entry(priv + off); !ok || e.Refs != k {
						report("private range: %d references, want %d", e.Refs, k)
					}
					for range k {
						if err := dev.UnlockMem(priv + off + 100); err != nil { // any interior pointer
							report("unlock private: %v", err)
						}
					}
					if registered(dev.Registry(), priv) {
						report("private range still pinned after the last unlock")
					}
					counts.locks.Add(1)
				case op < 92: // shared: lock a sub-range, which only adds a reference
					off := uintptr(r.IntN(sharedSize/4096)) * 4096
					n := uintptr(1 + r.IntN(int(sharedSize-off)))
					sharedHeld.Add(1)
					dp, err := dev.LockMem(shared+off, n)
					if err != nil {
						report("lock shared sub-range: %v", err)
					}
					e, _ := dev.Registry().Entry(shared)
					if dp != e.Dev+off {
						report("shared sub-range: device address %#x, want %#x", dp, e.Dev+off)
					}
					if err := dev.UnlockMem(shared + off); err != nil {
						report("unlock shared sub-range: %v", err)
					}
					sharedHeld.Add(-1)
					counts.sharedLocks.Add(1)
				case len(live) >= 2: // transfer between two blocks, through the device when it is a GPU
					a, b := live[0], live[len(live)-1]
					n := min(a.size, b.size, 64<<10)
					if dev.IsHost() {
						h := kmp.GetInitialDevice()
						if rc := kmp.TargetMemcpy(b.p, a.p, n, 0, 0, h, h); rc != 0 {
							report("omp_target_memcpy host to host: %d", rc)
						}
					} else {
						if err := target.MemcpyAsync(devBuf, uintptr(a.p), n, dev.ID, target.InitialDevice(), q); err != nil {
							report("submit: %v", err)
						}
						if err := target.MemcpyAsync(uintptr(b.p), devBuf, n, target.InitialDevice(), dev.ID, q); err != nil {
							report("retrieve: %v", err)
						}
						if err := q.Synchronize(context.Background()); err != nil {
							report("synchronize: %v", err)
						}
					}
					if string(bytesAt(a.p, n)) != string(bytesAt(b.p, n)) {
						report("transfer of %d bytes: destination differs", n)
					}
					// b now holds a's bytes up to n: re-mark it.
					seed++
					markBlock(bytesAt(b.p, b.size), seed)
					live[len(live)-1].seed = seed
					counts.transfers.Add(1)
				}
			}
			for time.Now().Before(deadline) && !failed.Load() {
				step()
				if len(live) > 0 && r.IntN(3) == 0 {
					pause.RLock()
					pinnedStep(dev, r, live[r.IntN(len(live))].p, &counts, report)
					pause.RUnlock()
				}
			}
			// The checker may still run: what is left is freed inside
			// pause too (a free may give a pinned region back).
			pause.RLock()
			defer pause.RUnlock()
			for _, b := range live {
				check(b)
				if err := alloc.Free(b.p); err != nil {
					report("final free: %v", err)
				}
				counts.frees.Add(1)
			}
			if q != nil {
				if err := q.Close(); err != nil {
					report("queue close: %v", err)
				}
				if err := dev.Free(plugin.MemDevice, devBuf); err != nil {
					report("device free: %v", err)
				}
			}
		}()
	}
	time.Sleep(time.Until(deadline))
	close(stop)
	wg.Wait()
	require.False(t, failed.Load(), "an invariant failed (see above)")
	require.Zero(t, counts.misaligned.Load(), "blocks served by a fallback keep the alignment trait of the allocator asked")

	e, ok := dev.Registry().Entry(shared)
	require.True(t, ok)
	require.Equal(t, 1, e.Refs, "only the setup's reference is left on the shared range")
	require.NoError(t, dev.UnlockMem(shared))
	for _, sa := range allocs {
		require.Zero(t, sa.a.Stats().BlocksLive, sa.name)
	}
	requireSame(t, base, "soak")
	return &counts
}

func max2(a, b uintptr) uintptr { return max(a, b) }

// pinnedStep runs, on a live block p, what issue 9 found wrong with pinned
// memory: a user lock and unlock inside a pinned block (a reference of the
// chunk's entry, never its own), now and then a Trim, and a Shutdown that
// must refuse while the block's chunk is held.
func pinnedStep(dev *target.Device, r *rand.Rand, p unsafe.Pointer, counts *soakCounts, report func(string, ...any)) {
	e, ok := dev.Registry().Entry(uintptr(p))
	if !ok {
		return // not pinned (a fallback block, or unpinned allocator)
	}
	if _, held := dev.Registry().Held(e.Host); !held {
		return
	}
	switch x := r.IntN(2000); {
	case x < 40: // often (hundreds in 3 s): quiescent checks fall between trims
		alloc.Trim()
		counts.trims.Add(1)
	case x == 40:
		err := target.Shutdown()
		if !errors.Is(err, target.ErrBusy) {
			report("Shutdown with a pinned block live: %v, want ErrBusy", err)
		}
		if d, err := target.Get(dev.ID); err != nil || d != dev {
			report("Shutdown refused, but the device changed: %v", err)
		}
		counts.shutdowns.Add(1)
	default:
		n := min(uintptr(64), e.Host+e.Size-uintptr(p))
		dp, err := dev.LockMem(uintptr(p), n)
		if err != nil {
			report("user lock inside a pinned block: %v", err)
			return
		}
		if dp != e.Dev+(uintptr(p)-e.Host) {
			report("user lock inside a pinned block: device address %#x, want %#x", dp, e.Dev+(uintptr(p)-e.Host))
		}
		if err := dev.UnlockMem(uintptr(p)); err != nil {
			report("user unlock inside a pinned block: %v", err)
		}
		if !registered(dev.Registry(), uintptr(p)) {
			report("a user unlock unpinned the chunk of a live pinned block")
		}
		counts.pinLocks.Add(1)
	}
}

func blockIsZero(b []byte) bool {
	for i := 0; i < len(b); i += 1 + len(b)/4096 {
		if b[i] != 0 {
			return false
		}
	}
	return true
}

// The soak on the host: the host device's registry for locks,
// omp_target_memcpy for transfers.
func TestSoak(t *testing.T) {
	d := soakDuration(t)
	if raceEnabled && os.Getenv(childEnv) == "" {
		// In a child, so that a runtime crash shows as a failure.
		out := runChild(t, "TestSoak")
		for _, l := range splitLines(out) {
			if contains(l, "soak (host") {
				t.Log(strings.TrimSpace(l))
			}
		}
		return
	}
	dev, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	c := soak(t, dev, 8, d)
	t.Logf("soak (host, %v): %v", d, c)
}

// The soak on a fake CUDA device, in a child: pinned allocators pin
// through cuMemHostRegister, locks go to the GPU's registry, transfers are
// queue submissions (staged when small) and retrievals.
func TestSoakFakeCUDA(t *testing.T) {
	d := soakDuration(t)
	out := runChild(t, "TestSoakFakeCUDAChild", append(fakeCUDAEnv(t), "SOAK_CHILD_DURATION="+(d/2).String(),
		"FAKECUDA_COPY_DELAY_US=20")...)
	for _, l := range splitLines(out) {
		if contains(l, "soak (fake CUDA") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

func TestSoakFakeCUDAChild(t *testing.T) {
	inChild(t)
	d, err := time.ParseDuration(os.Getenv("SOAK_CHILD_DURATION"))
	require.NoError(t, err)
	dev, err := target.Get(0)
	require.NoError(t, err)
	require.Equal(t, "cuda", dev.Plugin())
	c := soak(t, dev, 6, d)
	t.Logf("soak (fake CUDA device 0, %v): %v", d, c)
}
