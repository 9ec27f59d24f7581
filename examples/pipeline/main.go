// Pipeline shows why pinned memory matters, with target.Prefetcher: a
// producer fills pinned host buffers while queued copies of the previous
// ones run, a "kernel" (a device-to-device copy standing in for one) runs
// on a second queue that waits for each batch's copy through its event,
// and the host waits only for the copy that read the buffer it is about to
// refill. It is PyTorch's DataLoader(pin_memory=True) feeding
// tensor.to(device, non_blocking=True), in the 25 lines of run. The same
// batches through one buffer (each fill waits for the previous copy) are
// the baseline, and the overlap achieved is the time saved.
//
//	go run ./examples/pipeline
//
// On a GPU whose driver times events (CUDA; HSA from its async copies'
// timestamps) it reports the achieved
// host-to-device bandwidth of the pipeline's copies (the prefetcher's
// statistics: device time between events around each copy) against the
// peak for that size: the same pinned copy alone, back to back on an idle
// queue (one cuMemcpyHtoDAsync from pinned memory each). Without one the
// default device is the host, whose queues work at once, so there is
// nothing to overlap; the code is the same. OMPALLOC_CUDA_LIBRARY pointing
// at the fake driver of internal/fakedrv runs it on two fake GPUs (the
// examples' test does).
//
// One line of its output is "pipeline: " and a JSON object (Result), for
// scripts: the GPU bundle (scripts/gpu-check.sh) keeps it as pipeline.json.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/ompalloc/ompalloc/target"
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
	SerialNs    int64   `json:"serial_ns"`    // one buffer: each fill waits for the previous copy
	PipelinedNs int64   `json:"pipelined_ns"` // two buffers, overlapped
	Overlap     float64 `json:"overlap"`      // 1 - pipelined/serial: the share of the time overlap saved
	// Throughput is batches × batch bytes over the pipelined wall time:
	// what the whole pipeline, producer included, delivered.
	Throughput float64 `json:"throughput_gb_per_s"`
	// CopyOverlap is the prefetcher's figure for the pipelined run: the
	// share of the copies' device time the host did not wait for.
	CopyOverlap float64 `json:"copy_overlap,omitempty"`
	// H2D is the pipeline's copies' bandwidth from their device time
	// (events recorded around each copy: PrefetchStats.Bandwidth).
	H2D float64 `json:"h2d_gb_per_s,omitempty"`
	// PeakH2D is the same pinned copy alone: alone copies back to back on
	// an idle queue, between two events.
	PeakH2D float64 `json:"peak_h2d_gb_per_s,omitempty"`
	OfPeak  float64 `json:"of_peak,omitempty"` // H2D / PeakH2D
}

// fill is the producer's work on batch b: it writes every element.
func fill(buf []float32, b int) {
	for i := range buf {
		buf[i] = float32(b) + float32(i)*1e-6
	}
}

// run is the double-buffered loop (buffers 2): produce each batch into a
// pinned buffer, copy it on the prefetcher's queue, run the kernel on
// compute after the copy, into out.
func run(ctx context.Context, d *target.Device, buffers int, compute *target.Queue, out target.Array[float32]) (target.PrefetchStats, bool, error) {
	pf, err := target.NewPrefetcher[float32](d, buffers, elems)
	if err != nil {
		return target.PrefetchStats{}, false, err
	}
	pinned := true
	st, err := pf.Run(ctx, func(b int, host []float32) (int, error) {
		pinned = pinned && target.IsPinned(host)
		fill(host, b)
		if b == batches-1 {
			return len(host), io.EOF
		}
		return len(host), nil
	}, func(b *target.Batch[float32]) error {
		if err := b.Use(compute); err != nil { // compute waits for the copy, on the device
			return err
		}
		return target.CopyArray(out, b.Data, compute) // the kernel stand-in
	})
	err = errors.Join(err, compute.Synchronize(ctx), pf.Close())
	return st, pinned, err
}

// peak times the copy of one batch alone: alone copies of a pinned buffer
// back to back on an idle queue, between two events. It returns 0 where
// the driver times no events.
func peak(ctx context.Context, d *target.Device) (time.Duration, error) {
	host, err := target.AllocArray[float32](d, target.MemHost, elems)
	if err != nil {
		return 0, err
	}
	src, err := host.Host()
	if err != nil {
		return 0, errors.Join(err, host.Free())
	}
	dst, err := target.AllocArray[float32](d, target.MemDevice, elems)
	if err != nil {
		return 0, errors.Join(err, host.Free())
	}
	q, err := d.NewQueue()
	if err != nil {
		return 0, errors.Join(err, host.Free(), dst.Free())
	}
	began, err1 := d.NewEvent(true)
	ended, err2 := d.NewEvent(true)
	err = errors.Join(err1, err2)
	if err == nil {
		err = began.Record(q)
	}
	for i := 0; i < alone && err == nil; i++ {
		err = target.CopyToDevice(dst, src, q)
	}
	if err == nil {
		err = ended.Record(q)
	}
	if err == nil {
		err = ended.Synchronize(ctx)
	}
	var one time.Duration
	if err == nil {
		if t, terr := target.Elapsed(began, ended); terr == nil {
			one = t / alone
		}
	}
	for _, e := range []*target.Event{began, ended} {
		if e != nil {
			err = errors.Join(err, e.Close())
		}
	}
	return one, errors.Join(err, q.Close(), host.Free(), dst.Free())
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := target.Get(target.DefaultDevice())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("device: %v\n", d)
	compute, err := d.NewQueue()
	if err != nil {
		log.Fatal(err)
	}
	out, err := target.AllocArray[float32](d, target.MemDevice, elems)
	if err != nil {
		log.Fatal(err)
	}
	if _, _, err := run(ctx, d, 1, compute, out); err != nil { // a warm-up: first touches of every buffer
		log.Fatal(err)
	}
	serial, _, err := run(ctx, d, 1, compute, out)
	if err != nil {
		log.Fatal(err)
	}
	over, pinned, err := run(ctx, d, 2, compute, out)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("host buffers pinned: %v\n", pinned)
	res := Result{Device: d.String(), Pinned: pinned, Batches: over.Batches, BatchBytes: elems * 4,
		SerialNs: serial.Wall.Nanoseconds(), PipelinedNs: over.Wall.Nanoseconds(),
		Overlap:     1 - float64(over.Wall)/float64(serial.Wall),
		Throughput:  float64(over.Bytes) / over.Wall.Seconds() / 1e9,
		CopyOverlap: over.Overlap}
	fmt.Printf("%d batches of %d MiB: one buffer %v, two buffers %v: overlap saved %.0f%%\n",
		batches, elems*4>>20, serial.Wall.Round(time.Microsecond), over.Wall.Round(time.Microsecond), 100*res.Overlap)
	fmt.Printf("host: producing %v, waiting for copies %v\n", over.Produce.Round(time.Microsecond), over.Stall.Round(time.Microsecond))
	if d.IsHost() {
		fmt.Println("(the host device's queues do their work at once: the difference is noise, not overlap)")
	}
	if over.Timed {
		res.H2D = over.Bandwidth / 1e9
		fmt.Printf("achieved host-to-device bandwidth: %.2f GB/s (device time of %d copies, from events; %.0f%% of it hidden behind the host's work)\n",
			res.H2D, over.Batches, 100*res.CopyOverlap)
		one, err := peak(ctx, d)
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

	// The last batch went through the kernel into out: check it.
	got := make([]float32, elems)
	if err := target.CopyFromDevice(got, out, nil); err != nil {
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
	if err := errors.Join(compute.Close(), out.Free()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
}
