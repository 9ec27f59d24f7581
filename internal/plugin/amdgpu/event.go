package amdgpu

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// Events on HSA. A queue is a chain of async copies, each depending on the
// previous one's completion signal, and HSA has no event object: an event
// is a signal of its own, completed by a marker copy (8 bytes within a
// scratch buffer of the device's memory) chained after the queue's work.
// Another queue waits for it without blocking the host by chaining a
// marker of its own that depends on both its last signal and the event's
// (hsa_amd_memory_async_copy's dependent signals), which its later copies
// depend on.
//
// Timing: ROCr times async copies. "The runtime will provide the copy
// processing start timestamp and completion timestamp of each call to
// hsa_amd_memory_async_copy if the async copy profiling is enabled prior
// to the call ... The completion signal object is used to hold the last
// async copy start and end timestamp" (hsa_ext_amd.h,
// hsa_amd_profiling_async_copy_enable), in "the HSA system clock domain"
// (hsa_amd_profiling_get_async_copy_time), whose ticks per second
// hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY) gives. A timing
// event's marker completes a signal of its own, so Elapsed is the
// difference of the two markers' completion timestamps. The switch is the
// process's, not counted (ROCr sets a flag on every GPU agent): NewEvent
// turns it on for a timing event and nothing here turns it off, since
// another user of the runtime (a profiler, an OMPT tool, a second timing
// event) may count on it; every async copy of the process then carries
// timestamps, a small cost per copy. If another user turns it off, markers
// recorded meanwhile carry none and Elapsed says so.
//
// An event's signal is shared by the event and the queue entries that
// complete it or depend on it (sharedSig): the runtime reads a dependency
// until the dependent copy starts, so the signal is destroyed only when
// the last of them lets it go.

// sharedSig is a signal with several owners; the last release destroys it.
type sharedSig struct {
	sig  uint64
	refs atomic.Int32
}

func (s *sharedSig) release(fn *syms) error {
	if s.refs.Add(-1) == 0 {
		return fn.destroySignal(s.sig)
	}
	return nil
}

// scratchBuf returns the device's marker buffer (device.scratch),
// allocated at its first event and freed by Close. The markers copy 8
// bytes nobody reads, so any memory the GPU's copy engines reach will do:
// the GPU's fine-grained pool first (its own memory, no grant needed),
// then its coarse-grained pool (the memory tensors want, and absent on
// some GPUs), then the CPU's fine-grained pool granted to this GPU.
func (d *device) scratchBuf() (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	if d.scratch != 0 {
		return d.scratch, nil
	}
	var errs []error
	for _, pl := range []*pool{d.pools.fine, d.pools.coarse, d.host} {
		if pl == nil {
			continue
		}
		var p uintptr
		if err := d.fn.status("hsa_amd_memory_pool_allocate", d.fn.poolAllocate, uintptr(pl.handle), 64, 0, uintptr(unsafe.Pointer(&p))); err != nil {
			errs = append(errs, err)
			continue
		}
		if pl == d.host {
			if err := d.fn.status("hsa_amd_agents_allow_access", d.fn.allowAccess, 1, uintptr(unsafe.Pointer(&d.agent)), 0, p); err != nil {
				errs = append(errs, err, d.fn.status("hsa_amd_memory_pool_free", d.fn.poolFree, p))
				continue
			}
		}
		d.scratch, d.scratchPool = p, pl
		return p, nil
	}
	if len(errs) == 0 {
		return 0, fmt.Errorf("event marker buffer: %w", ErrNoPool)
	}
	return 0, fmt.Errorf("event marker buffer: %w", errors.Join(errs...))
}

// freeScratchLocked frees the marker buffer (d.mu held; the device's queues,
// the only users, are gone).
func (d *device) freeScratchLocked() error {
	if d.scratch == 0 {
		return nil
	}
	p := d.scratch
	d.scratch, d.scratchPool = 0, nil
	if err := d.fn.status("hsa_amd_memory_pool_free", d.fn.poolFree, p); err != nil {
		return d.errorf(err, "free the event marker buffer at %#x", p)
	}
	return nil
}

// asyncCopyDeps is asyncCopy after every signal of deps.
func (s *syms) asyncCopyDeps(dst uintptr, dstAgent uint64, src uintptr, srcAgent uint64, n uintptr, deps []uint64, sig uint64) error {
	var p uintptr
	if len(deps) > 0 {
		p = uintptr(unsafe.Pointer(&deps[0]))
	}
	return s.status("hsa_amd_memory_async_copy", s.memAsyncCopy, dst, uintptr(dstAgent), src, uintptr(srcAgent), n, uintptr(len(deps)), p, uintptr(sig))
}

// marker chains a marker copy on q after its work and after dep (if not
// nil), completing own's signal (if not nil) or a signal of the queue's.
// The entry keeps dep until its copy is done.
func (q *queue) marker(own, dep *sharedSig) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	buf, err := q.d.scratchBuf()
	if err != nil {
		return err
	}
	fn := q.d.fn
	var sig uint64
	if own != nil {
		sig = own.sig
	} else if sig, err = fn.newSignal(); err != nil {
		return err
	}
	var deps []uint64
	if len(q.pending) > 0 {
		deps = append(deps, q.pending[len(q.pending)-1].sig)
	}
	e := entry{sig: sig, shared: own}
	if dep != nil {
		deps = append(deps, dep.sig)
		e.holds = []*sharedSig{dep}
	}
	if err := fn.asyncCopyDeps(buf+32, q.d.agent, buf, q.d.agent, 8, deps, sig); err != nil {
		if own == nil {
			err = errors.Join(err, fn.destroySignal(sig))
		}
		return err
	}
	if dep != nil {
		dep.refs.Add(1)
	}
	if own != nil {
		own.refs.Add(1)
	}
	q.pending = append(q.pending, e)
	return nil
}

// NewEvent creates an event. A timing event turns the runtime's async copy
// profiling on (see above) where the runtime has it; where it has not, the
// event is made and Elapsed says errors.ErrUnsupported.
func (d *device) NewEvent(timing bool) (plugin.EventImpl, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, d.errorf(ErrClosed, "new event")
	}
	if timing && d.fn.copyProfEnable != 0 && d.fn.copyTime != 0 {
		if err := d.fn.status("hsa_amd_profiling_async_copy_enable", d.fn.copyProfEnable, 1); err != nil {
			return nil, d.errorf(err, "new timing event")
		}
	}
	return &event{d: d, timing: timing}, nil
}

type event struct {
	d      *device
	timing bool
	mu     sync.Mutex
	s      *sharedSig // the latest record's signal; nil before the first
}

func (e *event) queue(q plugin.QueueImpl, what string) (*queue, error) {
	hq, ok := q.(*queue)
	if !ok {
		return nil, e.d.errorf(ErrForeignQueue, "%s", what)
	}
	return hq, nil
}

// Record chains a marker completing a new signal after q's work.
func (e *event) Record(q plugin.QueueImpl) error {
	hq, err := e.queue(q, "record an event")
	if err != nil {
		return err
	}
	if hq.d != e.d {
		return e.d.errorf(ErrForeignQueue, "record an event")
	}
	sig, err := e.d.fn.newSignal()
	if err != nil {
		return e.d.errorf(err, "record an event")
	}
	s := &sharedSig{sig: sig}
	s.refs.Store(1) // the event's
	if err := hq.marker(s, nil); err != nil {
		return e.d.errorf(errors.Join(err, e.d.fn.destroySignal(sig)), "record an event")
	}
	e.mu.Lock()
	old := e.s
	e.s = s
	e.mu.Unlock()
	if old != nil {
		return old.release(e.d.fn)
	}
	return nil
}

// Wait chains a marker on q that depends on the event's signal.
func (e *event) Wait(q plugin.QueueImpl) error {
	hq, err := e.queue(q, "wait for an event")
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock() // the signal stays while the marker takes its reference
	if e.s == nil {
		return nil
	}
	if err := hq.marker(nil, e.s); err != nil {
		return hq.d.errorf(err, "wait for an event")
	}
	return nil
}

// hold returns the latest record's signal with a reference of the
// caller's (release it with release), or nil: a Record or Destroy
// meanwhile then cannot destroy the signal under the caller.
func (e *event) hold() *sharedSig {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.s != nil {
		e.s.refs.Add(1) // the event's reference is still there: never 0 here
	}
	return e.s
}

func (e *event) Query() (bool, error) {
	s := e.hold()
	if s == nil {
		return true, nil
	}
	done := e.d.fn.done(s.sig)
	return done, s.release(e.d.fn)
}

// Synchronize waits for the latest record's signal without e.mu, so that
// a Record, Wait, Query or Destroy meanwhile does not wait for the device;
// its reference keeps the signal alive until the wait returned.
func (e *event) Synchronize() error {
	s := e.hold()
	if s == nil {
		return nil
	}
	e.d.fn.waitZero(s.sig)
	return s.release(e.d.fn)
}

// copyTime is hsa_amd_profiling_get_async_copy_time's answer.
type copyTime struct{ start, end uint64 }

// Elapsed is the time from start's marker completing to e's, from the
// markers' copy timestamps: both timing events of this device, recorded
// and complete (else plugin.ErrNotReady).
func (e *event) Elapsed(start plugin.EventImpl) (_ time.Duration, err error) {
	s, ok := start.(*event)
	switch {
	case !ok:
		return 0, e.d.errorf(sentinel.ErrInvalidArgument, "elapsed time from another plugin's event")
	case s.d != e.d:
		return 0, e.d.errorf(sentinel.ErrInvalidArgument, "elapsed time from an event of amdgpu device %d: events of two devices", s.d.index)
	case !s.timing || !e.timing:
		return 0, e.d.errorf(sentinel.ErrInvalidArgument, "elapsed time: an event created without timing")
	}
	fn := e.d.fn
	if fn.copyTime == 0 || fn.copyProfEnable == 0 {
		return 0, e.d.errorf(errors.ErrUnsupported, "elapsed time: the HSA runtime has no hsa_amd_profiling_get_async_copy_time")
	}
	ss, es := s.hold(), e.hold()
	for _, h := range []*sharedSig{ss, es} {
		if h != nil {
			defer func() { err = errors.Join(err, h.release(fn)) }()
		}
	}
	if ss == nil || es == nil {
		return 0, e.d.errorf(sentinel.ErrInvalidArgument, "elapsed time: an event never recorded")
	}
	if !fn.done(ss.sig) || !fn.done(es.sig) {
		return 0, e.d.errorf(plugin.ErrNotReady, "elapsed time")
	}
	var t0, t1 copyTime
	if err := fn.status("hsa_amd_profiling_get_async_copy_time", fn.copyTime, uintptr(ss.sig), uintptr(unsafe.Pointer(&t0))); err != nil {
		return 0, e.d.errorf(err, "elapsed time")
	}
	if err := fn.status("hsa_amd_profiling_get_async_copy_time", fn.copyTime, uintptr(es.sig), uintptr(unsafe.Pointer(&t1))); err != nil {
		return 0, e.d.errorf(err, "elapsed time")
	}
	if t0.end == 0 || t1.end == 0 {
		return 0, e.d.errorf(errors.ErrUnsupported, "elapsed time: a marker carries no copy timestamps (async copy profiling was turned off in the process, hsa_amd_profiling_async_copy_enable(false), when it was recorded)")
	}
	var freq uint64
	if err := fn.status("hsa_system_get_info", fn.systemGetInfo, systemInfoTimestampFrequency, uintptr(unsafe.Pointer(&freq))); err != nil {
		return 0, e.d.errorf(err, "elapsed time")
	}
	if freq == 0 {
		return 0, e.d.errorf(errors.ErrUnsupported, "elapsed time: the runtime reports a timestamp frequency of 0")
	}
	ticks := int64(t1.end - t0.end) // negative if e completed first, as cuEventElapsedTime's
	return time.Duration(float64(ticks) * 1e9 / float64(freq)), nil
}

// systemInfoTimestampFrequency is HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY
// (hsa.h, hsa_system_info_t): a uint64_t, ticks per second.
const systemInfoTimestampFrequency = 3

func (e *event) Destroy() error {
	e.mu.Lock()
	s := e.s
	e.s = nil
	e.mu.Unlock()
	if s != nil {
		return s.release(e.d.fn)
	}
	return nil
}
