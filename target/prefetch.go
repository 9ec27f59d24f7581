package target

// The prefetcher: PyTorch's DataLoader(pin_memory=True) feeding
// .to(device, non_blocking=True), as one loop over pinned buffers.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
	"unsafe"
)

// Prefetcher moves batches of T from a producer on the host to a consumer
// on a device through N pinned host buffers, overlapping the producer's
// work with the copies: while batch i is copied, batch i+1 is produced in
// the next buffer. It is what PyTorch users write with
// DataLoader(pin_memory=True) and tensor.to(device, non_blocking=True) on
// a copy stream, with the events that keep it correct:
//
//   - each host buffer is refilled only after the copy that read it
//     completed (its event, waited for on the host);
//   - each device buffer is overwritten only after the work the consumer
//     queued on it completed (an event the copy queue waits for on the
//     device, without the host waiting);
//   - the consumer receives each batch's device side with the event its
//     copy records: Batch.Use makes a queue wait for it.
//
// A Prefetcher is used by one goroutine at a time: Run, then Run again or
// Close.
type Prefetcher[T any] struct {
	d     *Device
	copyQ *Queue
	slots []*prefetchSlot[T]
	batch int
	timed bool // the driver times events (CUDA, the host; not HSA, found at the first copy)
}

type prefetchSlot[T any] struct {
	host     []T
	hostMem  Array[T]
	dev      Array[T]
	began    *Event // recorded before the slot's copy, to time it
	copied   *Event // the slot's copy completed: the host buffer may be refilled
	released *Event // the consumer's work on the device buffer completed
	inFlight bool   // began and copied were recorded and not yet waited for
	consumed bool   // released was recorded
}

// Batch is one batch handed to Run's consumer.
type Batch[T any] struct {
	Index int      // 0 for the first batch
	Data  Array[T] // the batch on the device (as many elements as the producer filled)
	// Ready completes when the copy of the batch to Data has. It is valid
	// until the consumer returns.
	Ready *Event
	use   *Queue
}

// Use makes q wait (on the device, not the host) for the batch's copy,
// and tells the prefetcher that work queued on q until the consumer returns
// reads Data: its device buffer is overwritten only after that work
// completed. Call it for the queue the consumer's work on Data goes to
// (once per batch; a second call replaces the first). A consumer that
// waited for Ready on the host and used Data synchronously need not call
// it.
func (b *Batch[T]) Use(q *Queue) error {
	if err := q.WaitEvent(b.Ready); err != nil {
		return err
	}
	b.use = q
	return nil
}

// PrefetchStats describes one Run.
type PrefetchStats struct {
	Batches int           // batches copied and handed to the consumer
	Bytes   uint64        // bytes copied to the device
	Wall    time.Duration // Run's time, from its call to its return
	Produce time.Duration // host time in the producer
	Consume time.Duration // host time in the consumer
	// Stall is the host time spent waiting for a copy to complete before
	// refilling its buffer: what overlapping did not hide.
	Stall time.Duration
	// Copy is the device time of the copies, from timing events recorded
	// around each; zero where the driver times no events (HSA). Timed says
	// which.
	Copy  time.Duration
	Timed bool
	// Bandwidth is the copies' achieved bandwidth in bytes per second
	// (Bytes over Copy), 0 where the copies were not timed.
	Bandwidth float64
	// Overlap is the share of the copies' device time the host did not
	// spend waiting for them, from 0 (every copy waited for, nothing
	// overlapped) to 1 (every copy hidden behind the producer and the
	// consumer); 0 where the copies were not timed.
	Overlap float64
}

// finish sets the figures computed from the others, once Run is over.
func (s *PrefetchStats) finish(wall time.Duration) {
	s.Wall = wall
	if !s.Timed || s.Copy <= 0 {
		return
	}
	s.Bandwidth = float64(s.Bytes) / s.Copy.Seconds()
	s.Overlap = min(max(1-float64(s.Stall)/float64(s.Copy), 0), 1)
}

// NewPrefetcher makes a prefetcher to device d with buffers pinned host
// buffers (2: double buffering; at least 1) of batch elements of T each,
// device buffers of the same size, and a copy queue of its own. The host
// buffers are pinned host memory of d (Device.Alloc of MemHost:
// cuMemAllocHost on CUDA), so each copy is one DMA. Close releases it all.
func NewPrefetcher[T any](d *Device, buffers, batch int) (*Prefetcher[T], error) {
	if d == nil {
		return nil, fmt.Errorf("prefetcher: a nil device: %w", ErrInvalidArgument)
	}
	if buffers < 1 || batch < 1 {
		return nil, fmt.Errorf("%v: prefetcher of %d buffers of %d elements: %w: both must be at least 1", d, buffers, batch, ErrInvalidArgument)
	}
	var zero T
	size := uintptr(batch) * unsafe.Sizeof(zero)
	if unsafe.Sizeof(zero) == 0 || size/unsafe.Sizeof(zero) != uintptr(batch) {
		return nil, fmt.Errorf("%v: prefetcher batch of %d elements: %w: no size or too large", d, batch, ErrInvalidArgument)
	}
	p := &Prefetcher[T]{d: d, batch: batch, timed: true}
	var err error
	if p.copyQ, err = d.NewQueue(); err != nil {
		return nil, err
	}
	for range buffers {
		s := &prefetchSlot[T]{}
		p.slots = append(p.slots, s)
		if s.hostMem, err = AllocArray[T](d, MemHost, batch); err != nil {
			break
		}
		if s.host, err = s.hostMem.Host(); err != nil {
			break
		}
		if s.dev, err = AllocArray[T](d, MemDevice, batch); err != nil {
			break
		}
		if s.began, err = d.NewEvent(true); err != nil {
			break
		}
		if s.copied, err = d.NewEvent(true); err != nil {
			break
		}
		if s.released, err = d.NewEvent(false); err != nil {
			break
		}
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%v: prefetcher: %w", d, err), p.Close())
	}
	return p, nil
}

// Run moves batches until the producer reports the end, an error, or ctx
// is done, and returns what it measured.
//
// produce(i, host) fills host (batch elements, a pinned buffer) with batch
// i and returns how many elements it wrote; it returns io.EOF when there is
// no more data (the n elements written in that call still go), or any
// other error to stop Run with it. Each filled buffer's copy is queued at
// once; the producer then fills the next buffer while it runs.
//
// consume(b) receives batch i on the device. It queues its work on b.Data
// after calling b.Use(q) for its queue (or waits for b.Ready on the host)
// and returns; its error stops Run. It should not wait for its own work:
// the prefetcher orders the reuse of each buffer by events.
//
// Cancellation (ctx) is seen at each wait and before each batch: Run
// returns ctx.Err() with the copies already queued left to run; the next
// Run or Close waits for them. Run returns once every copy it queued has
// completed, so the host buffers may be refilled; the consumer's work may
// still run (Device.Synchronize, or the consumer's queue, waits for it).
func (p *Prefetcher[T]) Run(ctx context.Context, produce func(i int, host []T) (int, error), consume func(b *Batch[T]) error) (st PrefetchStats, err error) {
	st.Timed = p.timed
	t0 := time.Now()
	defer func() { st.finish(time.Since(t0)) }()
	if ctx == nil || produce == nil || consume == nil {
		return st, fmt.Errorf("%v: prefetch: %w: a nil context, producer or consumer", p.d, ErrInvalidArgument)
	}
	if p.copyQ == nil {
		return st, fmt.Errorf("%v: prefetch: %w: the prefetcher is closed", p.d, ErrInvalidArgument)
	}
	// A cancelled Run may have left copies running.
	if err := p.drain(ctx, &st); err != nil {
		return st, err
	}
	for i := 0; ; i++ {
		s := p.slots[i%len(p.slots)]
		if err := p.wait(ctx, s, &st); err != nil {
			return st, err
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
		tp := time.Now()
		n, perr := produce(i, s.host)
		st.Produce += time.Since(tp)
		if perr != nil && !errors.Is(perr, io.EOF) {
			return st, perr
		}
		if n < 0 || n > p.batch {
			return st, fmt.Errorf("%v: prefetch: batch %d: %w: the producer reports %d elements written in a buffer of %d", p.d, i, ErrInvalidArgument, n, p.batch)
		}
		if n > 0 {
			if err := p.send(ctx, i, n, s, consume, &st); err != nil {
				return st, err
			}
		}
		if perr != nil { // io.EOF
			return st, p.drain(ctx, &st)
		}
	}
}

// send queues the copy of slot s's n elements and hands the batch over.
func (p *Prefetcher[T]) send(ctx context.Context, i, n int, s *prefetchSlot[T], consume func(*Batch[T]) error, st *PrefetchStats) error {
	dst, err := s.dev.Slice(0, n)
	if err != nil {
		return err
	}
	if s.consumed {
		// The consumer's work on the device buffer: the copy waits for it
		// on the device.
		if err := p.copyQ.WaitEvent(s.released); err != nil {
			return err
		}
		s.consumed = false
	}
	if err := s.began.Record(p.copyQ); err != nil {
		return err
	}
	if err := CopyToDevice(dst, s.host[:n], p.copyQ); err != nil {
		return err
	}
	if err := s.copied.Record(p.copyQ); err != nil {
		return err
	}
	s.inFlight = true
	st.Batches++
	st.Bytes += uint64(dst.m.Size)
	b := &Batch[T]{Index: i, Data: dst, Ready: s.copied}
	tc := time.Now()
	err = consume(b)
	st.Consume += time.Since(tc)
	if err != nil {
		return err
	}
	if b.use != nil {
		if err := s.released.Record(b.use); err != nil {
			return err
		}
		s.consumed = true
	}
	return ctx.Err()
}

// wait waits on the host for slot s's copy, if one is in flight, and adds
// its device time.
func (p *Prefetcher[T]) wait(ctx context.Context, s *prefetchSlot[T], st *PrefetchStats) error {
	if !s.inFlight {
		return nil
	}
	t := time.Now()
	err := s.copied.Synchronize(ctx)
	st.Stall += time.Since(t)
	if err != nil {
		return err
	}
	s.inFlight = false
	if p.timed {
		d, err := Elapsed(s.began, s.copied)
		if err != nil {
			p.timed, st.Timed, st.Copy = false, false, 0 // the driver times no events after all
		} else {
			st.Copy += d
		}
	}
	return nil
}

// drain waits for every copy in flight.
func (p *Prefetcher[T]) drain(ctx context.Context, st *PrefetchStats) error {
	for _, s := range p.slots {
		if err := p.wait(ctx, s, st); err != nil {
			return err
		}
	}
	return nil
}

// Close waits for the copies in flight and releases the buffers, events
// and the copy queue. Work the consumer queued on a batch's device side
// must have completed (synchronize its queue first). A second Close does
// nothing.
func (p *Prefetcher[T]) Close() error {
	if p.copyQ == nil {
		return nil
	}
	errs := []error{p.copyQ.Close()}
	p.copyQ = nil
	for _, s := range p.slots {
		for _, e := range []*Event{s.began, s.copied, s.released} {
			if e != nil {
				errs = append(errs, e.Close())
			}
		}
		if s.dev.m.Addr != 0 {
			errs = append(errs, s.dev.Free())
		}
		if s.hostMem.m.Addr != 0 {
			errs = append(errs, s.hostMem.Free())
		}
	}
	p.slots = nil
	return errors.Join(errs...)
}
