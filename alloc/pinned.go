package alloc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ompalloc/ompalloc/internal/fault"
	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/loader"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

// Pinned memory is served by one caching heap per device: chunks are mapped,
// locked through the device (mlock on the host, cuMemHostRegister or
// hsa_amd_memory_lock on a GPU) and registered in its registry once, then
// sub-allocated like any heap. Small blocks share locked chunks; freed
// blocks are reused without relocking; huge blocks are never rounded to a
// power of two, and freed ones are kept (up to pinnedKeepHuge) for reuse.
// Trim, and destroying a pinned allocator, unlock what is idle.
const (
	pinnedKeepChunks = 4         // 16 MiB of empty locked chunks kept
	pinnedKeepHuge   = 256 << 20 // bytes of freed huge locked regions kept
)

var (
	pinnedMu    sync.Mutex
	pinnedHeaps = map[int]*heap.Heap{}
)

func pinDevice(set traits.Set) (int, error) {
	if set.PinDevice >= 0 {
		if _, err := target.Get(set.PinDevice); err != nil {
			return 0, &traits.TraitError{Key: traits.PinDevice, Value: uintptr(set.PinDevice), HasValue: true, Reason: err.Error()}
		}
		return set.PinDevice, nil
	}
	return target.DefaultDevice(), nil
}

func pinnedHeap(dev int) *heap.Heap {
	pinnedMu.Lock()
	defer pinnedMu.Unlock()
	h := pinnedHeaps[dev]
	if h == nil {
		h = heap.New(&pinSource{dev: dev}, heap.Config{
			Name: fmt.Sprintf("pinned(device %d)", dev), KeepChunks: pinnedKeepChunks, KeepHuge: pinnedKeepHuge})
		pinnedHeaps[dev] = h
	}
	return h
}

func trimPinned() {
	pinnedMu.Lock()
	hs := make([]*heap.Heap, 0, len(pinnedHeaps))
	for _, h := range pinnedHeaps {
		hs = append(hs, h)
	}
	pinnedMu.Unlock()
	for _, h := range hs {
		h.Trim()
	}
}

// pinSource maps memory and locks it through a device.
type pinSource struct{ dev int }

func (s *pinSource) Acquire(n, align uintptr) (uintptr, error) {
	if err := pinLimit.reserve(n); err != nil {
		return 0, err
	}
	c, err := loader.C()
	if err == nil {
		err = fault.Check(fault.PinMap)
	}
	if err != nil {
		pinLimit.release(n)
		return 0, err
	}
	p, err := c.MapAligned(n, align)
	if err != nil {
		pinLimit.release(n)
		return 0, err
	}
	d, err := target.Get(s.dev)
	if err == nil {
		err = fault.Check(fault.PinLock)
	}
	if err == nil {
		start := time.Now()
		_, err = d.LockMem(p, n)
		pinStats.lockNanos.Add(time.Since(start).Nanoseconds())
	}
	if err != nil {
		_ = c.Unmap(p, n)
		pinLimit.release(n)
		return 0, fmt.Errorf("%w: %d bytes for device %d: %w", ErrPinFailed, n, s.dev, err)
	}
	pinStats.locks.Add(1)
	return p, nil
}

func (s *pinSource) Release(p, n uintptr) error {
	var uerr error
	if d, err := target.Get(s.dev); err == nil {
		start := time.Now()
		uerr = d.UnlockMem(p)
		pinStats.lockNanos.Add(time.Since(start).Nanoseconds())
	}
	c, err := loader.C()
	if err == nil {
		err = c.Unmap(p, n)
	}
	pinLimit.release(n)
	if uerr != nil {
		return uerr
	}
	return err
}

// pinLimit caps the bytes all pinned heaps may lock, so that a program
// cannot lock all of RAM by accident; hitting it behaves like a failed pin.
var pinLimit = &limit{}

type limit struct {
	once sync.Once
	max  atomic.Int64
	used atomic.Int64
}

// PinnedLimitEnv overrides the default limit on pinned bytes ("0" means no
// limit; sizes accept K, M, G suffixes).
const PinnedLimitEnv = "OMPALLOC_PINNED_LIMIT"

func (l *limit) init() {
	l.once.Do(func() {
		n := defaultPinnedLimit()
		if v := os.Getenv(PinnedLimitEnv); v != "" {
			if x, err := parseSize(v); err == nil {
				n = int64(x)
			} else {
				fmt.Fprintf(warnOut, "ompalloc: warning: %s=%q: %v; using %d\n", PinnedLimitEnv, v, err, n)
			}
		}
		l.max.Store(n)
	})
}

func (l *limit) reserve(n uintptr) error {
	l.init()
	max := l.max.Load()
	if used, ok := reserve(&l.used, int64(n), max); !ok {
		return fmt.Errorf("%w: %d more bytes would exceed the pinned-memory limit of %d bytes (%d in use; set %s)",
			ErrPinFailed, n, max, used, PinnedLimitEnv)
	}
	return nil
}

func (l *limit) release(n uintptr) { l.used.Add(-int64(n)) }

// SetPinnedLimit sets the limit on bytes locked by pinned allocators (0: no
// limit) and returns the previous one.
func SetPinnedLimit(n uintptr) uintptr {
	pinLimit.init()
	return uintptr(pinLimit.max.Swap(int64(n)))
}

// PinnedLimit returns the limit and the bytes currently locked under it.
func PinnedLimit() (max, used uintptr) {
	pinLimit.init()
	return uintptr(pinLimit.max.Load()), uintptr(pinLimit.used.Load())
}

func parseSize(v string) (uintptr, error) {
	v = strings.TrimSpace(strings.ToUpper(v))
	mult := uint64(1)
	for suf, m := range map[string]uint64{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40} {
		if strings.HasSuffix(v, suf) {
			v, mult = strings.TrimSuffix(v, suf), m
		}
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a size: %w", err)
	}
	return uintptr(n * mult), nil
}

var pinStats struct {
	locks     atomic.Int64
	lockNanos atomic.Int64
}

// PinnedStats describes the pinned heaps of all devices.
type PinnedStats struct {
	Bytes    uintptr       // bytes locked for pinned heaps
	Chunks   int           // 4 MiB locked chunks
	Limit    uintptr       // the pinned-bytes limit (0: none)
	Locks    int64         // lock calls made
	LockTime time.Duration // time spent locking and unlocking
}

// Pinned returns the pinned heaps' statistics.
func Pinned() PinnedStats {
	pinnedMu.Lock()
	var st PinnedStats
	for _, h := range pinnedHeaps {
		hs := h.Stats()
		st.Bytes += hs.Mapped
		st.Chunks += hs.Chunks
	}
	pinnedMu.Unlock()
	st.Limit, _ = PinnedLimit()
	st.Locks = pinStats.locks.Load()
	st.LockTime = time.Duration(pinStats.lockNanos.Load())
	return st
}
