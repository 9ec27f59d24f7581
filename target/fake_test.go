package target

import (
	"errors"
	"fmt"
	"github.com/ompalloc/ompalloc/internal/device"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// aliasBit marks the fake's device-accessible addresses of locked host
// memory, so tests can tell which address a copy was given. User-space
// addresses never have it set.
const aliasBit = uintptr(1) << 62

var errInjected = errors.New("injected failure")

// fakeImpl is a device whose memory is host memory and whose asynchronous
// copies run late: a worker per queue performs them after delay, and not at
// all while the device is held.
type fakeImpl struct {
	name  string
	delay time.Duration

	failHostAlloc atomic.Bool
	failLock      atomic.Bool
	failUnlock    atomic.Bool // UnlockHost fails with the lock kept (ErrStillLocked), as HSA's
	failSync      atomic.Bool // queues' Synchronize fails (Destroy then returns at once, its work still queued)
	failQuery     atomic.Bool // queues' Query fails

	contractBreaks atomic.Int64 // Copy calls the generic layer should have refused (plugin.Impl.Copy)

	gateMu sync.Mutex
	gate   chan struct{} // while not nil, queue workers wait for it to close

	freeGate    atomic.Pointer[chan struct{}] // while set, Free of host memory waits for it to close
	freeWaiting atomic.Int32                  // Frees waiting at freeGate

	mu                     sync.Mutex
	allocs                 map[uintptr]fakeAlloc
	locks                  map[uintptr]uintptr
	lockCalls, unlockCalls int
	aliasCopies            int // copies given a device alias where a host address belongs
	pinnedCopies           int // copies whose host side was pinned memory
	freedReads             int // copies that read a freed buffer
	closed                 bool
	queues                 []*fakeQueue
}

type fakeAlloc struct {
	size  uintptr
	kind  MemKind
	freed bool
}

func newFake(name string, delay time.Duration) *fakeImpl {
	return &fakeImpl{name: name, delay: delay, allocs: map[uintptr]fakeAlloc{}, locks: map[uintptr]uintptr{}}
}

func (f *fakeImpl) Info() Info {
	return Info{Name: f.name, Vendor: "fake", Memory: 1 << 30, NUMANode: -1}
}

func (f *fakeImpl) LockHost(p, n uintptr) (uintptr, error) {
	if f.failLock.Load() {
		return 0, fmt.Errorf("lock %#x+%d: %w", p, n, errInjected)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lockCalls++
	f.locks[p] = n
	return p | aliasBit, nil
}

func (f *fakeImpl) UnlockHost(p uintptr) error {
	if f.failUnlock.Load() {
		return fmt.Errorf("unlock %#x: %w: %w", p, errInjected, ErrStillLocked)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.locks[p]; !ok {
		return fmt.Errorf("fake unlock %#x: not locked", p)
	}
	f.unlockCalls++
	delete(f.locks, p)
	return nil
}

func (f *fakeImpl) ExternalLock(p, n uintptr) (pinreg.External, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for a, al := range f.allocs {
		if al.kind == MemHost && !al.freed && a <= p && p+n <= a+al.size {
			return pinreg.External{Host: a, Dev: a | aliasBit, Size: al.size}, true, nil
		}
	}
	return pinreg.External{}, false, nil
}

func (f *fakeImpl) Alloc(kind MemKind, n uintptr) (uintptr, error) {
	if kind == MemHost && f.failHostAlloc.Load() {
		return 0, fmt.Errorf("fake alloc of %d pinned bytes: %w", n, errInjected)
	}
	c, err := dl.C()
	if err != nil {
		return 0, err
	}
	p, err := c.Map(n)
	if err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allocs[p] = fakeAlloc{size: n, kind: kind}
	return p, nil
}

// Free poisons and keeps the memory until Close, so a late copy reading a
// freed buffer is seen rather than crashing.
func (f *fakeImpl) Free(kind MemKind, p uintptr) error {
	if g := f.freeGate.Load(); g != nil && kind == MemHost {
		// As cuMemFreeHost, which waits for the device's work in flight.
		f.freeWaiting.Add(1)
		<-*g
		f.freeWaiting.Add(-1)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.allocs[p]
	if !ok || a.freed || a.kind != kind {
		return fmt.Errorf("fake free of %s memory at %#x: not allocated", kind, p)
	}
	b := cmem.Bytes(p, a.size)
	for i := range b {
		b[i] = 0xdd
	}
	a.freed = true
	f.allocs[p] = a
	return nil
}

// live counts allocations of kind not freed.
func (f *fakeImpl) live(kind MemKind) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, a := range f.allocs {
		if a.kind == kind && !a.freed {
			n++
		}
	}
	return n
}

func (f *fakeImpl) counts() (lockCalls, unlockCalls, pinnedCopies, freedReads int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lockCalls, f.unlockCalls, f.pinnedCopies, f.freedReads
}

// pinnedLocked reports whether [p, p+n) is pinned host memory: allocated by
// Alloc(MemHost) or locked by LockHost.
func (f *fakeImpl) pinnedLocked(p, n uintptr) bool {
	for a, al := range f.allocs {
		if al.kind == MemHost && !al.freed && a <= p && p+n <= a+al.size {
			return true
		}
	}
	for a, size := range f.locks {
		if a <= p && p+n <= a+size {
			return true
		}
	}
	return false
}

func (f *fakeImpl) isFreed(p uintptr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for a, al := range f.allocs {
		if a <= p && p < a+al.size {
			return al.freed
		}
	}
	return false
}

func (f *fakeImpl) Copy(dst, src, n uintptr, dir plugin.Direction, q plugin.QueueImpl) error {
	// plugin.Impl.Copy's contract: the generic layer checked all of this.
	fq, isFake := q.(*fakeQueue)
	if n == 0 || dst == 0 || src == 0 || dst+n < dst || src+n < src || dir == plugin.HostToHost ||
		(q != nil && (!isFake || fq.f != f)) {
		f.contractBreaks.Add(1)
		return fmt.Errorf("fake copy %s of %d bytes from %#x to %#x: the generic layer let it through", dir, n, src, dst)
	}
	f.mu.Lock()
	if dst&aliasBit != 0 || src&aliasBit != 0 {
		// Like CUDA's copies, the fake's take host addresses for the host side.
		f.aliasCopies++
		f.mu.Unlock()
		return fmt.Errorf("fake copy %s: a device alias where a host address belongs", dir)
	}
	host := src
	if dir == plugin.DeviceToHost {
		host = dst
	}
	if dir != plugin.DeviceToDevice && f.pinnedLocked(host, n) {
		f.pinnedCopies++
	}
	f.mu.Unlock()
	run := func() {
		if f.isFreed(src) {
			f.mu.Lock()
			f.freedReads++
			f.mu.Unlock()
		}
		cmem.Copy(dst, src, n)
	}
	if q == nil {
		run()
		return nil
	}
	q.(*fakeQueue).enqueue(run)
	return nil
}

func (f *fakeImpl) NewQueue() (plugin.QueueImpl, error) {
	q := &fakeQueue{f: f}
	q.cond = sync.NewCond(&q.mu)
	go q.work()
	f.mu.Lock()
	f.queues = append(f.queues, q)
	f.mu.Unlock()
	return q, nil
}

// Close first lets every queue's worker finish (a queue destroyed after a
// failed wait may still have copies queued), as a driver ends a context's
// work before its memory goes.
func (f *fakeImpl) Close() error {
	f.mu.Lock()
	qs := f.queues
	f.queues = nil
	f.mu.Unlock()
	for _, q := range qs {
		q.mu.Lock()
		for len(q.ops) > 0 {
			q.cond.Wait()
		}
		q.mu.Unlock()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, _ := dl.C()
	for p, a := range f.allocs {
		_ = c.Unmap(p, a.size)
	}
	f.allocs = map[uintptr]fakeAlloc{}
	f.closed = true
	return nil
}

// holdWork stops every queue's worker before its next copy, until release.
func (f *fakeImpl) holdWork() {
	f.gateMu.Lock()
	defer f.gateMu.Unlock()
	if f.gate == nil {
		f.gate = make(chan struct{})
	}
}

func (f *fakeImpl) release() {
	f.gateMu.Lock()
	defer f.gateMu.Unlock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
}

// fakeQueue performs its copies in order on a worker goroutine, each after
// the device's delay.
type fakeQueue struct {
	f       *fakeImpl
	mu      sync.Mutex
	cond    *sync.Cond
	ops     []func()
	stopped bool
}

func (q *fakeQueue) enqueue(op func()) {
	q.mu.Lock()
	q.ops = append(q.ops, op)
	q.cond.Broadcast()
	q.mu.Unlock()
}

func (q *fakeQueue) work() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for len(q.ops) == 0 && !q.stopped {
			q.cond.Wait()
		}
		if len(q.ops) == 0 {
			return
		}
		op := q.ops[0]
		q.mu.Unlock()
		q.f.gateMu.Lock()
		g := q.f.gate
		q.f.gateMu.Unlock()
		if g != nil {
			<-g // the test holds the device's work back
		}
		time.Sleep(q.f.delay)
		op()
		q.mu.Lock()
		q.ops = q.ops[1:]
		q.cond.Broadcast()
	}
}

func (q *fakeQueue) Query() (bool, error) {
	if q.f.failQuery.Load() {
		return false, fmt.Errorf("fake query: %w", errInjected)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ops) == 0, nil
}

func (q *fakeQueue) Synchronize() error {
	if q.f.failSync.Load() {
		return fmt.Errorf("fake synchronize: %w", errInjected)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ops) > 0 {
		q.cond.Wait()
	}
	return nil
}

// Destroy waits for the queue's work, unless its wait fails (failSync):
// then, as the CUDA plugin over cuStreamDestroy, it returns the error at
// once and the worker performs the queued copies afterwards; Query and
// Synchronize still answer for them.
func (q *fakeQueue) Destroy() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var err error
	if q.f.failSync.Load() {
		err = fmt.Errorf("fake synchronize before destroy: %w", errInjected)
	}
	for err == nil && len(q.ops) > 0 {
		q.cond.Wait()
	}
	q.stopped = true
	q.cond.Broadcast()
	return err
}

// fakePlugin offers impls, or fails Init with err.
type fakePlugin struct {
	name  string
	impls []plugin.Impl
	err   error
}

func (p *fakePlugin) Name() string { return p.name }
func (p *fakePlugin) Init() error  { return p.err }
func (p *fakePlugin) Status() DriverStatus {
	s := DriverStatus{Plugin: p.name, Init: "FAKE_SUCCESS", Err: p.err}
	if p.err != nil {
		s.Init = p.err.Error()
	}
	return s
}
func (p *fakePlugin) Devices() []plugin.Impl { return p.impls }

// withPlugins rediscovers the devices with the given accelerator plugins
// (and the real host), and shuts them down when the test ends.
func withPlugins(t testing.TB, ps ...plugin.Plugin) {
	t.Helper()
	require.NoError(t, Shutdown())
	var vs []device.Vendor
	for _, p := range ps {
		vs = append(vs, device.Vendor{Name: p.Name(), New: func() plugin.Plugin { return p }})
	}
	restore := device.ReplaceVendors(vs)
	t.Cleanup(func() {
		require.NoError(t, Shutdown())
		restore()
	})
}

// withFake gives one fake accelerator, device 0.
func withFake(t *testing.T, delay time.Duration) (*fakeImpl, *Device) {
	t.Helper()
	f := newFake("fake0", delay)
	withPlugins(t, &fakePlugin{name: "fake", impls: []plugin.Impl{f}})
	t.Cleanup(f.release) // before Shutdown waits for the queues
	d, err := Get(0)
	require.NoError(t, err)
	require.False(t, d.IsHost())
	return f, d
}

// hostMem maps n bytes of pageable host memory for the test.
func hostMem(t testing.TB, n uintptr) uintptr {
	t.Helper()
	c, err := dl.C()
	require.NoError(t, err)
	p, err := c.Map(n)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Unmap(p, n) })
	return p
}

func fill(p, n uintptr, seed int) {
	b := cmem.Bytes(p, n)
	for i := range b {
		b[i] = byte(seed*131 + i*7 + 1)
	}
}

func hasFill(p, n uintptr, seed int) bool {
	b := cmem.Bytes(p, n)
	for i := range b {
		if b[i] != byte(seed*131+i*7+1) {
			return false
		}
	}
	return true
}

func clearMem(p, n uintptr) { clear(cmem.Bytes(p, n)) }

// unsafePointer passes a Go byte slice to C for the duration of a call.
func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
