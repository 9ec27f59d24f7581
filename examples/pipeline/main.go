// Pipeline shows why pinned memory matters: a producer fills pinned host
// buffers while queued copies of the previous ones run, a "kernel" (a
// device-to-device copy standing in for one) runs on a second queue that
// waits for each batch's copy through an event, and the host waits only
// for what it is about to overwrite. The same batches are then run one
// step at a time, and the overlap achieved is the time saved.
//
//	go run ./examples/pipeline
//
// On a GPU whose driver times events (CUDA) it reports the achieved
// host-to-device bandwidth of the pipeline's copies (device time between
// events around each copy) against the peak for that size: the same
// pinned copy alone, back to back on an idle queue (one cuMemcpyHtoDAsync
// from pinned memory each). Without one the default device is the host,
// whose queues work at once, so there is nothing to overlap; the code is
// the same. OMPALLOC_CUDA_LIBRARY pointing at the fake driver of
// internal/fakedrv runs it on two fake GPUs (the examples' test does).
//
// One line of its output is "pipeline: " and a JSON object (Result), for
// scripts: the GPU bundle (scripts/gpu-check.sh) keeps it as pipeline.json.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/target/plugin"
	"github.com/ompalloc/ompalloc/traits"
)

const (
	batches = 16
	elems   = 1 << 20 // 4 MiB of float32 per batch
	alone   = 8       // copies timed back to back for the peak
)

// Result is the line "pipeline: {...}" the example prints, for scripts.
// Bandwidths are in GB/s (1e9 bytes); H2D, PeakH2D and OfPeak are absent
// where the driver times no events (an HSA runtime without async copy
// profiling).
type Result struct {
	Device      string  `json:"device"`
	Pinned      bool    `json:"pinned"` // the host buffers are pinned for the device
	Batches     int     `json:"batches"`
	BatchBytes  int     `json:"batch_bytes"`
	SerialNs    int64   `json:"serial_ns"`    // one step at a time
	PipelinedNs int64   `json:"pipelined_ns"` // overlapped
	Overlap     float64 `json:"overlap"`      // 1 - pipelined/serial: the share of the time overlap saved
	// Throughput is batches × batch bytes over the pipelined wall time:
	// what the whole pipeline, producer included, delivered.
	Throughput float64 `json:"throughput_gb_per_s"`
	// H2D is the pipeline's copies' bandwidth from their device time
	// (events recorded around each copy).
	H2D float64 `json:"h2d_gb_per_s,omitempty"`
	// PeakH2D is the same pinned copy alone: alone copies back to back on
	// the idle copy queue, between two events.
	PeakH2D float64 `json:"peak_h2d_gb_per_s,omitempty"`
	OfPeak  float64 `json:"of_peak,omitempty"` // H2D / PeakH2D
}

// fill is the producer's work on batch b: it writes every element.
func fill(buf []float32, b int) {
	for i := range buf {
		buf[i] = float32(b) + float32(i)*1e-6
	}
}

// stage is one of the two slots of the double buffer: a pinned host
// buffer, its device input and output, and the events that say when the
// slot may be reused.
type stage struct {
	host     []float32
	in, out  target.Array[float32]
	began    *target.Event // recorded just before the slot's H2D copy, to time it
	copied   *target.Event // the H2D copy of the slot's batch is done
	computed *target.Event // the kernel read the slot's input
}

type pipeline struct {
	d        *target.Device
	copyQ    *target.Queue
	computeQ *target.Queue
	stages   [2]stage
	h2d      time.Duration // the H2D copies' device time, where the driver times events
	copies   int           // how many copies h2d covers
	timed    bool
}

func newPipeline(d *target.Device, a alloc.Interface) (*pipeline, error) {
	p := &pipeline{d: d}
	var err error
	if p.copyQ, err = d.NewQueue(); err != nil {
		return nil, err
	}
	if p.computeQ, err = d.NewQueue(); err != nil {
		return nil, err
	}
	for i := range p.stages {
		s := &p.stages[i]
		if s.host, err = alloc.Make[float32](a, elems); err != nil {
			return nil, err
		}
		if s.in, err = target.AllocArray[float32](d, plugin.MemDevice, elems); err != nil {
			return nil, err
		}
		if s.out, err = target.AllocArray[float32](d, plugin.MemDevice, elems); err != nil {
			return nil, err
		}
		if s.began, err = d.NewEvent(true); err != nil {
			return nil, err
		}
		if s.copied, err = d.NewEvent(true); err != nil {
			return nil, err
		}
		if s.computed, err = d.NewEvent(false); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// run pushes every batch through. overlapped: the host waits only for the
// copy that read the buffer it is about to refill; otherwise it waits for
// each batch's copy and kernel before producing the next.
func (p *pipeline) run(ctx context.Context, overlapped bool) (time.Duration, error) {
	p.h2d, p.copies, p.timed = 0, 0, true
	t0 := time.Now()
	for b := range batches {
		s := &p.stages[b%2]
		// The copy of batch b-2 read this host buffer: wait for it alone.
		if err := s.copied.Synchronize(ctx); err != nil {
			return 0, err
		}
		if b >= 2 && overlapped {
			p.timeCopy(s)
		}
		fill(s.host, b)
		// The kernel of batch b-2 read this device input: the copy queue
		// waits for it on the device, the host does not.
		if err := p.copyQ.WaitEvent(s.computed); err != nil {
			return 0, err
		}
		if err := s.began.Record(p.copyQ); err != nil {
			return 0, err
		}
		if err := target.CopyToDevice(s.in, s.host, p.copyQ); err != nil { // one DMA: the buffer is pinned
			return 0, err
		}
		if err := s.copied.Record(p.copyQ); err != nil {
			return 0, err
		}
		// The kernel stand-in, on its own queue, after this batch's copy.
		if err := p.computeQ.WaitEvent(s.copied); err != nil {
			return 0, err
		}
		if err := target.CopyArray(s.out, s.in, p.computeQ); err != nil {
			return 0, err
		}
		if err := s.computed.Record(p.computeQ); err != nil {
			return 0, err
		}
		if !overlapped {
			if err := s.computed.Synchronize(ctx); err != nil {
				return 0, err
			}
			p.timeCopy(s)
		}
	}
	if err := p.computeQ.SynchronizeContext(ctx); err != nil {
		return 0, err
	}
	if err := p.copyQ.SynchronizeContext(ctx); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// timeCopy adds the device time of s's last copy (between its two events,
// recorded around it), where the driver can time events.
func (p *pipeline) timeCopy(s *stage) {
	if !p.timed {
		return
	}
	d, err := target.Elapsed(s.began, s.copied)
	if err != nil {
		p.timed = false // a runtime that cannot time events (errors.ErrUnsupported)
		return
	}
	p.h2d += d
	p.copies++
}

// peak times the copy of one batch alone: alone copies of stage 0's
// pinned buffer back to back on the idle copy queue, between two events.
// It returns 0 where the driver times no events.
func (p *pipeline) peak(ctx context.Context) (time.Duration, error) {
	s := &p.stages[0]
	if err := p.copyQ.SynchronizeContext(ctx); err != nil {
		return 0, err
	}
	if err := s.began.Record(p.copyQ); err != nil {
		return 0, err
	}
	for range alone {
		if err := target.CopyToDevice(s.in, s.host, p.copyQ); err != nil {
			return 0, err
		}
	}
	if err := s.copied.Record(p.copyQ); err != nil {
		return 0, err
	}
	if err := s.copied.Synchronize(ctx); err != nil {
		return 0, err
	}
	d, err := target.Elapsed(s.began, s.copied)
	if err != nil {
		return 0, nil // not timed here
	}
	return d / alone, nil
}

func (p *pipeline) close() error {
	var errs []error
	errs = append(errs, p.copyQ.Close(), p.computeQ.Close())
	for _, s := range p.stages {
		errs = append(errs, s.began.Close(), s.copied.Close(), s.computed.Close(), s.in.Free(), s.out.Free())
	}
	return errors.Join(errs...)
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pinnedMem, err := alloc.New(memspace.Default,
		alloc.WithPinned(true), alloc.WithAlignment(64), alloc.WithFallback(traits.DefaultMemFb))
	if err != nil {
		log.Fatal(err)
	}
	d, err := target.Get(target.DefaultDevice())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("device: %v\n", d)
	p, err := newPipeline(d, pinnedMem)
	if err != nil {
		log.Fatal(err)
	}
	pinned := target.IsPinned(p.stages[0].host) && target.IsPinned(p.stages[1].host)
	fmt.Printf("host buffers pinned: %v\n", pinned)

	if _, err := p.run(ctx, false); err != nil { // a warm-up: first touches of every buffer
		log.Fatal(err)
	}
	serial, err := p.run(ctx, false)
	if err != nil {
		log.Fatal(err)
	}
	over, err := p.run(ctx, true)
	if err != nil {
		log.Fatal(err)
	}
	res := Result{Device: d.String(), Pinned: pinned, Batches: batches, BatchBytes: elems * 4,
		SerialNs: serial.Nanoseconds(), PipelinedNs: over.Nanoseconds(),
		Overlap:    1 - float64(over)/float64(serial),
		Throughput: batches * elems * 4 / over.Seconds() / 1e9}
	fmt.Printf("%d batches of %d MiB: one step at a time %v, pipelined %v: overlap saved %.0f%%\n",
		batches, elems*4>>20, serial.Round(time.Microsecond), over.Round(time.Microsecond), 100*res.Overlap)
	if d.IsHost() {
		fmt.Println("(the host device's queues do their work at once: the difference is noise, not overlap)")
	}
	if p.timed && p.h2d > 0 {
		res.H2D = float64(p.copies) * elems * 4 / p.h2d.Seconds() / 1e9
		fmt.Printf("achieved host-to-device bandwidth: %.2f GB/s (device time of %d copies, from events)\n", res.H2D, p.copies)
		one, err := p.peak(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if one > 0 {
			res.PeakH2D = elems * 4 / one.Seconds() / 1e9
			res.OfPeak = res.H2D / res.PeakH2D
			fmt.Printf("peak for %d MiB, the same pinned copy alone: %.2f GB/s; the pipeline's copies reached %.0f%% of it\n",
				elems*4>>20, res.PeakH2D, 100*res.OfPeak)
		}
	} else {
		fmt.Println("achieved host-to-device bandwidth: not timed (the driver times no events here)")
	}
	line, err := json.Marshal(res)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("pipeline: %s\n", line)

	// The last batch went through: check its output.
	last := p.stages[(batches-1)%2]
	got := make([]float32, elems)
	if err := target.CopyFromDevice(got, last.out, nil); err != nil {
		log.Fatal(err)
	}
	want := make([]float32, elems)
	fill(want, batches-1)
	for i := range got {
		if got[i] != want[i] {
			log.Fatalf("element %d of the last batch: %v, want %v", i, got[i], want[i])
		}
	}
	fmt.Println("last batch verified")
	for _, s := range p.stages {
		if err := alloc.FreeSlice(pinnedMem, s.host); err != nil {
			log.Fatal(err)
		}
	}
	if err := errors.Join(p.close(), pinnedMem.Destroy()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
}
