//go:build linux

package main

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/target"
)

// CUDA driver API values (cuda.h).
const (
	registerPortable  = 0x01 // CU_MEMHOSTREGISTER_PORTABLE
	streamNonBlocking = 0x01 // CU_STREAM_NON_BLOCKING
	resultNotReady    = 600  // CUDA_ERROR_NOT_READY
)

type prober struct {
	d    *driver
	size uintptr
	rep  *Report
}

type question struct {
	name, question string
	ask            func(p *prober, a *Answer) error
}

var questions = []question{
	{"mixed_range_copy", "a copy over a range whose first half is registered and second half pageable (the reference: not supported, CUDA_ERROR_INVALID_VALUE)", askMixed},
	{"adjacent_registrations_copy", "a copy over two adjacent registrations (the reference promises nothing)", askAdjacent},
	{"shared_page_registrations", "two registrations sharing one page: is the second refused, and do both copy?", askSharedPage},
	{"portable_dtoh_async", "a DtoH copy on another context's stream into a PORTABLE registration: still running right after it was queued?", askPortableAsync},
	{"release_while_busy", "how long cuMemHostUnregister and cuMemFreeHost take while another stream is busy, against an idle device", askReleaseBusy},
	{"caller_context", "the thread's current context after an ompalloc call on a thread that had another context current", askCallerContext},
	{"node_bandwidth", "registered (ompalloc's pinned path) and driver-peak (cuMemAllocHost) H2D bandwidth with the host buffer on the GPU's node and on the farthest node", askNodeBandwidth},
}

// gpuNode is device 0's node as ompalloc reads it (PCI slot, sysfs).
func gpuNode() int {
	d, err := target.Get(0)
	if err != nil || d.IsHost() {
		return -1
	}
	return d.Info().NUMANode
}

const chunk = 1 << 20 // the ranges of the registration questions

// copies runs the three copies of the registration questions over
// [h, h+n) against a device buffer and says how each ended; data_ok says
// whether a pattern written went to the device and came back intact.
func (p *prober) copies(a *Answer, h, n uintptr) (allOK bool, err error) {
	d := p.d
	var dev uintptr
	if err := d.must("cuMemAlloc_v2", uintptr(unsafe.Pointer(&dev)), n); err != nil {
		return false, err
	}
	defer d.call("cuMemFree_v2", dev)
	var s uintptr
	if err := d.must("cuStreamCreate", uintptr(unsafe.Pointer(&s)), streamNonBlocking); err != nil {
		return false, err
	}
	defer d.call("cuStreamDestroy_v2", s)
	b := cmem.Bytes(h, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	h2d, ok1 := d.try("cuMemcpyHtoD_v2", dev, h, n)
	clear(b)
	d2h, ok2 := d.try("cuMemcpyDtoH_v2", h, dev, n)
	good := ok1 && ok2
	for i := 0; good && i < len(b); i += 4093 {
		good = b[i] == byte(i*7+1)
	}
	async, ok3 := d.try("cuMemcpyHtoDAsync_v2", dev, h, n, s)
	syncRes, _ := d.try("cuStreamSynchronize", s)
	a.set("htod_sync", h2d)
	a.set("dtoh_sync", d2h)
	a.set("htod_async", async)
	a.set("stream_synchronize", syncRes)
	a.set("data_ok", good)
	return ok1 && ok2 && ok3 && good, nil
}

func verdict(ok bool) string {
	if ok {
		return "accepted: every copy succeeded and the data came back"
	}
	return "refused or wrong: see results"
}

func askMixed(p *prober, a *Answer) error {
	h, free, err := hostBuf(2*chunk, -1)
	if err != nil {
		return err
	}
	defer free()
	if err := p.d.must("cuMemHostRegister_v2", h, chunk, 0); err != nil {
		return err
	}
	defer p.d.call("cuMemHostUnregister", h)
	ok, err := p.copies(a, h, 2*chunk)
	if err != nil {
		return err
	}
	a.Answer = verdict(ok)
	return nil
}

func askAdjacent(p *prober, a *Answer) error {
	h, free, err := hostBuf(2*chunk, -1)
	if err != nil {
		return err
	}
	defer free()
	for i := uintptr(0); i < 2; i++ {
		if err := p.d.must("cuMemHostRegister_v2", h+i*chunk, chunk, 0); err != nil {
			return fmt.Errorf("registration %d: %w", i+1, err)
		}
		defer p.d.call("cuMemHostUnregister", h+i*chunk)
	}
	ok, err := p.copies(a, h, 2*chunk)
	if err != nil {
		return err
	}
	a.Answer = verdict(ok)
	return nil
}

func askSharedPage(p *prober, a *Answer) error {
	const page, half = 4096, 6144 // [0, 6144) and [6144, 12288) share the page at 4096
	h, free, err := hostBuf(3*page, -1)
	if err != nil {
		return err
	}
	defer free()
	r1, ok1 := p.d.try("cuMemHostRegister_v2", h, half, 0)
	r2, ok2 := p.d.try("cuMemHostRegister_v2", h+half, half, 0)
	a.set("register_first", r1)
	a.set("register_second", r2)
	if ok2 {
		c := &Answer{}
		ok, err := p.copies(c, h+half, half)
		if err != nil {
			return err
		}
		a.set("copy_second", c.Results)
		a.set("copy_second_ok", ok)
	}
	if ok1 {
		u, _ := p.d.try("cuMemHostUnregister", h)
		a.set("unregister_first", u)
	}
	if ok2 {
		u, _ := p.d.try("cuMemHostUnregister", h+half)
		a.set("unregister_second", u)
	}
	switch {
	case ok1 && ok2:
		a.Answer = "both registered: the driver shares the page"
	case ok1:
		a.Answer = "the second is refused: " + r2
	default:
		a.Answer = "the first failed: " + r1
	}
	return nil
}

func askPortableAsync(p *prober, a *Answer) error {
	d := p.d
	n := p.size
	h, free, err := hostBuf(n, -1)
	if err != nil {
		return err
	}
	defer free()
	// Registered PORTABLE in device 0's primary context.
	if err := d.must("cuMemHostRegister_v2", h, n, registerPortable); err != nil {
		return err
	}
	defer func() {
		d.restore()
		d.call("cuMemHostUnregister", h)
	}()
	_, what, release, err := d.otherContext()
	if err != nil {
		return err
	}
	defer release()
	a.set("other_context", what)
	var dev, s uintptr
	if err := d.must("cuMemAlloc_v2", uintptr(unsafe.Pointer(&dev)), n); err != nil {
		return err
	}
	defer d.call("cuMemFree_v2", dev)
	if err := d.must("cuStreamCreate", uintptr(unsafe.Pointer(&s)), streamNonBlocking); err != nil {
		return err
	}
	defer d.call("cuStreamDestroy_v2", s)
	t0 := time.Now()
	q, _ := d.try("cuMemcpyDtoHAsync_v2", h, dev, n, s)
	queued := time.Since(t0)
	query := d.call("cuStreamQuery", s)
	syncRes, _ := d.try("cuStreamSynchronize", s)
	total := time.Since(t0)
	a.set("bytes", n)
	a.set("queue", q)
	a.set("queue_ns", queued.Nanoseconds())
	a.set("stream_query_after_queue", d.name(query))
	a.set("stream_synchronize", syncRes)
	a.set("until_done_ns", total.Nanoseconds())
	switch query {
	case resultNotReady:
		a.Answer = "still running after the call returned: the DMA is late, the registration is pinned for this context too"
	case 0:
		a.Answer = "done when the call returned: the copy was synchronous for this context (staged as pageable?)"
	default:
		a.Answer = "cuStreamQuery: " + d.name(query)
	}
	return nil
}

// busy queues k device-to-device copies of n bytes on stream s.
func (p *prober) busy(s, src, dst uintptr, k int) error {
	for range k {
		if err := p.d.must("cuMemcpyDtoDAsync_v2", dst, src, p.size, s); err != nil {
			return err
		}
	}
	return nil
}

func askReleaseBusy(p *prober, a *Answer) error {
	d := p.d
	n := p.size
	var src, dst, s uintptr
	if err := d.must("cuMemAlloc_v2", uintptr(unsafe.Pointer(&src)), n); err != nil {
		return err
	}
	defer d.call("cuMemFree_v2", src)
	if err := d.must("cuMemAlloc_v2", uintptr(unsafe.Pointer(&dst)), n); err != nil {
		return err
	}
	defer d.call("cuMemFree_v2", dst)
	if err := d.must("cuStreamCreate", uintptr(unsafe.Pointer(&s)), streamNonBlocking); err != nil {
		return err
	}
	defer d.call("cuStreamDestroy_v2", s)
	const k = 32
	// How long the busy work takes alone.
	t0 := time.Now()
	if err := p.busy(s, src, dst, k); err != nil {
		return err
	}
	if err := d.must("cuStreamSynchronize", s); err != nil {
		return err
	}
	a.set("busy_alone_ns", time.Since(t0).Nanoseconds())

	const hostN = 64 << 20
	release := func(name string, busy bool) error {
		var h uintptr
		var free func()
		var err error
		if name == "cuMemHostUnregister" {
			if h, free, err = hostBuf(hostN, -1); err != nil {
				return err
			}
			defer free()
			if err := d.must("cuMemHostRegister_v2", h, hostN, 0); err != nil {
				return err
			}
		} else if err := d.must("cuMemAllocHost_v2", uintptr(unsafe.Pointer(&h)), hostN); err != nil {
			return err
		}
		key := "idle"
		if busy {
			key = "busy"
			if err := p.busy(s, src, dst, k); err != nil {
				return err
			}
		}
		t := time.Now()
		r, _ := d.try(name, h)
		el := time.Since(t)
		a.set(name+"_"+key+"_ns", el.Nanoseconds())
		a.set(name+"_"+key, r)
		if busy {
			a.set(name+"_stream_still_busy_after", d.call("cuStreamQuery", s) == resultNotReady)
		}
		return d.must("cuStreamSynchronize", s)
	}
	for _, name := range []string{"cuMemHostUnregister", "cuMemFreeHost"} {
		for _, busy := range []bool{false, true} {
			if err := release(name, busy); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	var waits []string
	for _, name := range []string{"cuMemHostUnregister", "cuMemFreeHost"} {
		if still, _ := a.Results[name+"_stream_still_busy_after"].(bool); !still {
			waits = append(waits, name)
		}
	}
	if len(waits) == 0 {
		a.Answer = "neither waited for the busy stream"
	} else {
		a.Answer = fmt.Sprintf("the busy stream had finished when %v returned: they waited for it (or it was short: compare busy_alone_ns)", waits)
	}
	return nil
}

func askCallerContext(p *prober, a *Answer) error {
	d := p.d
	other, what, release, err := d.otherContext()
	if err != nil {
		return err
	}
	defer release()
	a.set("other_context", what)
	before := d.current()
	dev, err := target.Get(0)
	if err != nil {
		return err
	}
	// The ompalloc calls a program makes: device memory, a lock, a
	// synchronous copy each way, the unlock and the free.
	const n = 1 << 20
	h, free, err := hostBuf(n, -1)
	if err != nil {
		return err
	}
	defer free()
	var errs []error
	dp, err := dev.Alloc(plugin.MemDevice, n)
	if err == nil {
		_, e1 := dev.LockMem(h, n)
		e2 := target.Memcpy(dp, h, n, dev.ID, target.InitialDevice())
		e3 := target.Memcpy(h, dp, n, target.InitialDevice(), dev.ID)
		var e4 error
		if e1 == nil {
			e4 = dev.UnlockMem(h)
		}
		errs = append(errs, e1, e2, e3, e4, dev.Free(plugin.MemDevice, dp))
	} else {
		errs = append(errs, err)
	}
	after := d.current()
	a.set("before", fmt.Sprintf("%#x", before))
	a.set("after", fmt.Sprintf("%#x", after))
	a.set("device0_primary", fmt.Sprintf("%#x", d.ctx0))
	if err := errors.Join(errs...); err != nil {
		a.set("ompalloc_errors", err.Error())
	}
	switch {
	case before != other:
		a.Answer = "the other context was not current to begin with"
	case after == before:
		a.Answer = "kept: the caller's context is current after the ompalloc calls"
	case after == d.ctx0:
		a.Answer = "replaced by device 0's primary context"
	default:
		a.Answer = "replaced by another context"
	}
	return nil
}

func askNodeBandwidth(p *prober, a *Answer) error {
	if !numa.Supported() {
		return errSkip("no memory policies on this system: buffers cannot be placed")
	}
	topo := numa.System()
	ref := p.rep.GPUNode
	a.set("gpu_node", ref)
	if ref < 0 {
		n, err := numa.CurrentNode()
		if err != nil {
			return err
		}
		ref = n
		a.set("reference", fmt.Sprintf("the GPU's node is unknown: node %d, the probe's CPU's", ref))
	}
	nodes := []int{ref}
	far, farDist := -1, -1
	for _, id := range topo.IDs() {
		nd, ok := topo.Node(id)
		if !ok || nd.MemTotal < 2*uint64(p.size) || id == ref {
			continue
		}
		if dist := topo.Distance(ref, id); dist > farDist {
			far, farDist = id, dist
		}
	}
	if far >= 0 {
		nodes = append(nodes, far)
	} else {
		a.set("far_node", "none: one NUMA node with memory")
	}
	dev, err := target.Get(0)
	if err != nil {
		return err
	}
	n := p.size
	dp, err := dev.Alloc(plugin.MemDevice, n)
	if err != nil {
		return err
	}
	defer func() { _ = dev.Free(plugin.MemDevice, dp) }()
	per := map[string]any{}
	for i, node := range nodes {
		label := "near" // the GPU's node, or the probe's CPU's when that is unknown
		if i == 1 {
			label = "far"
		}
		r := map[string]any{"node": node}
		per[label] = r
		// ompalloc's pinned path: pageable memory on node, locked through
		// ompalloc, copied with a synchronous Memcpy.
		h, free, err := hostBuf(n, node)
		if err != nil {
			r["error"] = err.Error()
			continue
		}
		r["registered_pages_on"] = nodesOf(h, n)
		if _, err := dev.LockMem(h, n); err != nil {
			r["registered_error"] = err.Error()
		} else {
			gbs, err := rate(n, func() error { return target.Memcpy(dp, h, n, dev.ID, target.InitialDevice()) })
			if err != nil {
				r["registered_error"] = err.Error()
			} else {
				r["registered_gb_per_s"] = gbs
			}
			_ = dev.UnlockMem(h)
		}
		free()
		// The driver's peak: cuMemAllocHost under a thread policy for node.
		gbs, where, err := p.peak(node, dp)
		if err != nil {
			r["peak_error"] = err.Error()
		} else {
			r["peak_gb_per_s"], r["peak_pages_on"] = gbs, where
			if reg, ok := r["registered_gb_per_s"].(float64); ok && gbs > 0 {
				r["registered_of_peak"] = reg / gbs
			}
		}
		p.d.restore()
	}
	a.set("per_node", per)
	a.Answer = "see per_node: registered_of_peak on each node, and the pages' nodes"
	return nil
}

// rate times copies of n bytes for about 200 ms (at least 3) and returns
// GB/s (10^9 bytes per second) of the best one.
func rate(n uintptr, copy1 func() error) (float64, error) {
	if err := copy1(); err != nil { // first touch and the driver's warm-up
		return 0, err
	}
	best := time.Duration(1<<63 - 1)
	start := time.Now()
	for i := 0; i < 3 || time.Since(start) < 200*time.Millisecond; i++ {
		t := time.Now()
		if err := copy1(); err != nil {
			return 0, err
		}
		best = min(best, max(time.Since(t), 1))
		if i > 1000 {
			break
		}
	}
	return float64(n) / float64(best.Nanoseconds()), nil
}

// peak is cuMemAllocHost memory on node copied to dp with
// cuMemcpyHtoDAsync on a stream of its own, in device 0's context.
func (p *prober) peak(node int, dp uintptr) (float64, string, error) {
	d := p.d
	d.restore()
	n := p.size
	restore, err := numa.SetThreadPolicy(numa.ModeBind, []int{node})
	if err != nil {
		return 0, "", err
	}
	var h uintptr
	err = d.must("cuMemAllocHost_v2", uintptr(unsafe.Pointer(&h)), n)
	if err == nil { // pages the driver left to first touch follow the policy too
		b := cmem.Bytes(h, n)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
	}
	if rerr := restore(); err == nil {
		err = rerr
	}
	if err != nil {
		if h != 0 {
			d.call("cuMemFreeHost", h)
		}
		return 0, "", err
	}
	defer d.call("cuMemFreeHost", h)
	where := nodesOf(h, n)
	var s uintptr
	if err := d.must("cuStreamCreate", uintptr(unsafe.Pointer(&s)), streamNonBlocking); err != nil {
		return 0, where, err
	}
	defer d.call("cuStreamDestroy_v2", s)
	gbs, err := rate(n, func() error {
		if err := d.must("cuMemcpyHtoDAsync_v2", dp, h, n, s); err != nil {
			return err
		}
		return d.must("cuStreamSynchronize", s)
	})
	return gbs, where, err
}
