package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/traits"
)

func maxOf(s []int64) int64 {
	m := int64(0)
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// touch writes one byte per page so that the pages exist before timing.
func touch(p, n uintptr) {
	b := cmem.Bytes(p, n)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
}

// allocSection: alloc+free pairs on omp_default_mem_alloc, an allocator
// with alignment=64, and one with pinned=true (null_fb, so that a failed pin
// is reported instead of silently served unpinned).
func allocSection(c *benchConfig) *benchSection {
	s := &benchSection{}
	allocs := map[string]*alloc.Allocator{}
	s.setup = func() error {
		def, ok := ompglue.Lookup(uintptr(kmp.DefaultMemAlloc))
		if !ok {
			return errors.New("omp_default_mem_alloc is not available")
		}
		allocs["default"] = def
		a64, err := alloc.New(memspace.Default, alloc.WithAlignment(64))
		if err != nil {
			return err
		}
		allocs["align64"] = a64
		pin, err := alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithFallback(traits.NullFb))
		if err != nil {
			return err
		}
		allocs["pinned"] = pin
		return nil
	}
	s.teardown = func() {
		for name, a := range allocs {
			if name != "default" {
				_ = a.Destroy() // trims the pinned heap: its chunks are unlocked
			}
		}
	}
	for _, series := range []string{"default", "align64", "pinned"} {
		for _, size := range c.pick(quickAllocSizes, fullAllocSizes) {
			series, size := series, uintptr(size)
			s.cases = append(s.cases, &benchCase{group: "alloc_free", series: series, size: int64(size),
				run: func(budget time.Duration) (float64, int, error) {
					a := allocs[series]
					return measure(budget, func(n int) error {
						for range n {
							p, err := a.Alloc(size)
							if err != nil {
								return err
							}
							if err := a.Free(p); err != nil {
								return err
							}
						}
						return nil
					})
				}})
		}
	}
	return s
}

// lockSizeSection: lock+unlock of a range that is not locked yet, so that
// each pair reaches the driver (mlock/munlock on the host,
// cuMemHostRegister/Unregister or hsa_amd_memory_lock/unlock on a GPU).
func lockSizeSection(c *benchConfig) *benchSection {
	s := &benchSection{}
	sizes := c.pick(quickAllocSizes, fullAllocSizes)
	bufLen := uintptr(maxOf(sizes))
	var buf uintptr
	s.setup = func() error {
		lc, err := dl.C()
		if err != nil {
			return err
		}
		if buf, err = lc.Map(bufLen); err != nil {
			return err
		}
		touch(buf, bufLen)
		return nil
	}
	s.teardown = func() {
		if lc, err := dl.C(); err == nil && buf != 0 {
			_ = lc.Unmap(buf, bufLen)
		}
	}
	devs := []int{target.InitialDevice()}
	if gpu, _ := pickDevice(c); gpu != nil && !gpu.IsHost() {
		devs = append(devs, gpu.ID)
	}
	for _, dev := range devs {
		d, err := target.Get(dev)
		if err != nil {
			continue
		}
		series := fmt.Sprintf("device %d (%s)", dev, d.Plugin())
		if d.IsHost() {
			series = "host (mlock)"
		}
		for _, size := range sizes {
			size := uintptr(size)
			s.cases = append(s.cases, &benchCase{group: "lock_size", series: series, size: int64(size),
				run: func(budget time.Duration) (float64, int, error) {
					return measure(budget, func(n int) error {
						for range n {
							if _, err := d.LockMem(buf, size); err != nil {
								return err
							}
							if err := d.UnlockMem(buf); err != nil {
								return err
							}
						}
						return nil
					})
				}})
		}
	}
	return s
}

// Regions of lockRegionsSection: small ranges side by side, so that 100,000
// of them lock only a few MiB (a page is mlock'ed once, however many ranges
// share it).
const regionBytes = 32

// lockRegionsSection: with N ranges locked on the host device, the cost of
// a lock+unlock of a contained sub-range (a registry hit: no driver call)
// and of a lookup, in a pseudo-random order.
func lockRegionsSection(c *benchConfig) *benchSection {
	s := &benchSection{}
	var (
		d      *target.Device
		buf    uintptr
		bufLen uintptr
		locked int64
	)
	maxN := maxOf(c.regions)
	s.setup = func() error {
		var err error
		if d, err = target.Get(target.InitialDevice()); err != nil {
			return err
		}
		lc, err := dl.C()
		if err != nil {
			return err
		}
		bufLen = (uintptr(maxN)*regionBytes + 4095) &^ 4095
		buf, err = lc.Map(bufLen)
		return err
	}
	s.teardown = func() {
		for i := int64(0); i < locked; i++ {
			_ = d.UnlockMem(buf + uintptr(i)*regionBytes)
		}
		if lc, err := dl.C(); err == nil && buf != 0 {
			_ = lc.Unmap(buf, bufLen)
		}
	}
	grow := func(n int64) error {
		for ; locked < n; locked++ {
			if _, err := d.LockMem(buf+uintptr(locked)*regionBytes, regionBytes); err != nil {
				return fmt.Errorf("locking region %d of %d: %w", locked+1, n, err)
			}
		}
		return nil
	}
	// pick returns an address inside one of the n regions: xorshift32, as the
	// registry benchmarks do.
	pick := func(x *uint32, n int64) uintptr {
		*x ^= *x << 13
		*x ^= *x >> 17
		*x ^= *x << 5
		return buf + uintptr(uint64(*x)*uint64(n)>>32)*regionBytes + 8
	}
	for _, n := range c.regions {
		s.cases = append(s.cases,
			&benchCase{group: "lock_regions", series: "lock+unlock hit", regions: n,
				run: func(budget time.Duration) (float64, int, error) {
					if err := grow(n); err != nil {
						return 0, 0, err
					}
					x := uint32(2463534242)
					return measure(budget, func(k int) error {
						for range k {
							p := pick(&x, n)
							if _, err := d.LockMem(p, 16); err != nil {
								return err
							}
							if err := d.UnlockMem(p); err != nil {
								return err
							}
						}
						return nil
					})
				}},
			&benchCase{group: "lock_regions", series: "lookup", regions: n,
				run: func(budget time.Duration) (float64, int, error) {
					if err := grow(n); err != nil {
						return 0, 0, err
					}
					reg := d.Registry()
					x := uint32(2463534242)
					return measure(budget, func(k int) error {
						for range k {
							if _, ok := reg.Entry(pick(&x, n)); !ok {
								return errors.New("lookup missed a locked region")
							}
						}
						return nil
					})
				}})
	}
	return s
}

// transferBuffers are the host sides of the transfer groups, each as large
// as the largest size: pageable memory, a block from a pinned allocator, and
// pageable memory registered with LockMem. A buffer that could not be had
// records why; its series then fail with that reason.
type transferBuffers struct {
	d        *target.Device
	n        uintptr
	dev      uintptr
	pageable uintptr
	reg      uintptr
	regOK    bool
	pin      *alloc.Allocator
	pinBlk   uintptr
	peak     *cudaPeak // withPeak on a CUDA device
	withPeak bool
	errs     map[string]error
	report   *BenchDevice // where the buffers' nodes are reported; nil: nowhere
}

func (t *transferBuffers) host(series string) (uintptr, error) {
	if err := t.errs[series]; err != nil {
		return 0, err
	}
	switch series {
	case "pageable":
		return t.pageable, nil
	case "pinned":
		return t.pinBlk, nil
	case "registered":
		return t.reg, nil
	}
	return 0, fmt.Errorf("unknown series %q", series)
}

func (t *transferBuffers) setup() error {
	t.errs = map[string]error{}
	lc, err := dl.C()
	if err != nil {
		return err
	}
	if t.dev, err = t.d.Alloc(target.MemDevice, t.n); err != nil {
		return err
	}
	if t.d.IsHost() {
		touch(t.dev, t.n) // host "device" memory is host memory: fault it in now
	}
	// Every host buffer on the device's node, as the pinned allocator places
	// its chunks: a series whose buffer sits on a far node measures the
	// socket link, not ompalloc (pinned/peak above 1 on two sockets).
	node := t.d.Info().NUMANode
	if t.pageable, err = lc.Map(t.n); err != nil {
		return err
	}
	placeOnNode(t.pageable, t.n, node)
	touch(t.pageable, t.n)
	if t.reg, err = lc.Map(t.n); err != nil {
		return err
	}
	placeOnNode(t.reg, t.n, node)
	touch(t.reg, t.n)
	if _, err := t.d.LockMem(t.reg, t.n); err != nil {
		t.errs["registered"] = err
	} else {
		t.regOK = true
	}
	t.pin, err = alloc.New(memspace.Default, alloc.WithPinned(true), alloc.WithPinDevice(t.d.ID), alloc.WithFallback(traits.NullFb))
	if err == nil {
		var p unsafe.Pointer
		if p, err = t.pin.Alloc(t.n); err == nil {
			t.pinBlk = uintptr(p)
			touch(t.pinBlk, t.n)
		}
	}
	if err != nil {
		t.errs["pinned"] = err
	}
	if t.withPeak {
		if t.peak, err = newCUDAPeak(t.d.ID, t.n, node); err != nil {
			t.errs[peakSeries] = err
		}
	}
	if t.report != nil {
		t.report.HostNodes = map[string]string{"pageable": nodesOf(t.pageable, t.n)}
		if t.regOK {
			t.report.HostNodes["registered"] = nodesOf(t.reg, t.n)
		}
		if t.pinBlk != 0 {
			t.report.HostNodes["pinned"] = nodesOf(t.pinBlk, t.n)
		}
		if t.peak != nil {
			t.report.HostNodes[peakSeries] = nodesOf(t.peak.host, t.n)
		}
	}
	return nil
}

// placeOnNode asks for [p, p+n) on node (MPOL_PREFERRED) before its pages
// are faulted in; nothing where the node is unknown or policies are not
// supported (the report then shows where the pages went).
func placeOnNode(p, n uintptr, node int) {
	if node < 0 || !numa.Supported() {
		return
	}
	if _, ok := numa.System().Node(node); !ok {
		return
	}
	_ = numa.Apply(p, []numa.Part{{Len: n, Mode: numa.ModePreferred, Nodes: []int{node}}})
}

// nodesOf says on which nodes the pages of [p, p+n) are: up to 64 pages
// sampled evenly, as a node list ("0", "0-1"), or why that is unknown.
func nodesOf(p, n uintptr) string {
	if !numa.Supported() {
		return "unknown: no memory policies on this system"
	}
	const page = 4096
	pages := max(n/page, 1)
	step := max(pages/64, 1)
	var addrs []uintptr
	for i := uintptr(0); i < pages; i += step {
		addrs = append(addrs, p+i*page)
	}
	got, err := numa.PageNodes(addrs)
	if err != nil {
		return "unknown: " + err.Error()
	}
	var nodes []int
	for _, v := range got {
		if v >= 0 && !slices.Contains(nodes, v) {
			nodes = append(nodes, v)
		}
	}
	if len(nodes) == 0 {
		return "unknown: move_pages found no page"
	}
	slices.Sort(nodes)
	return numa.FormatList(nodes)
}

func (t *transferBuffers) teardown() {
	if t.peak != nil {
		_ = t.peak.close()
	}
	lc, _ := dl.C()
	if t.pinBlk != 0 {
		_ = t.pin.Free(cmem.Ptr(t.pinBlk))
	}
	if t.pin != nil {
		_ = t.pin.Destroy()
	}
	if t.regOK {
		_ = t.d.UnlockMem(t.reg)
	}
	if lc != nil {
		for _, p := range []uintptr{t.reg, t.pageable} {
			if p != 0 {
				_ = lc.Unmap(p, t.n)
			}
		}
	}
	if t.dev != 0 {
		_ = t.d.Free(target.MemDevice, t.dev)
	}
}

// hasPeak reports whether the driver's own peak is measured on d: CUDA
// only (cuMemAllocHost + cuMemcpy*Async).
func hasPeak(d *target.Device) bool { return d.Plugin() == "cuda" }

// transferSection: synchronous copies between host and device memory, and,
// on a CUDA device, the driver's own peak for the same sizes.
func transferSection(c *benchConfig, d *target.Device, report *BenchDevice) *benchSection {
	sizes := c.pick(quickGPUSizes, fullGPUSizes)
	t := &transferBuffers{d: d, n: uintptr(maxOf(sizes)), withPeak: hasPeak(d), report: report}
	s := &benchSection{setup: t.setup, teardown: t.teardown}
	allSeries := []string{"pageable", "pinned", "registered"}
	if t.withPeak {
		allSeries = append(allSeries, peakSeries)
	}
	for _, group := range []string{"h2d", "d2h"} {
		for _, series := range allSeries {
			for _, size := range sizes {
				group, series, size := group, series, uintptr(size)
				s.cases = append(s.cases, &benchCase{group: group, series: series, size: int64(size),
					run: func(budget time.Duration) (float64, int, error) {
						if series == peakSeries {
							if err := t.errs[peakSeries]; err != nil {
								return 0, 0, err
							}
							return measure(budget, func(n int) error { return t.peak.copies(group, t.dev, size, n) })
						}
						h, err := t.host(series)
						if err != nil {
							return 0, 0, err
						}
						return measure(budget, func(n int) error {
							for range n {
								var err error
								if group == "h2d" {
									err = target.Memcpy(t.dev, h, size, d.ID, target.InitialDevice())
								} else {
									err = target.Memcpy(h, t.dev, size, target.InitialDevice(), d.ID)
								}
								if err != nil {
									return err
								}
							}
							return nil
						})
					}})
			}
		}
	}
	return s
}

// smallCopySection: a small host→device copy submitted on a queue and
// waited for, from pageable memory through the staging pool ("staged"),
// from pageable memory with staging off ("unstaged"), and from pinned
// memory ("pinned source").
func smallCopySection(c *benchConfig, d *target.Device) *benchSection {
	var sizes []int64
	for _, v := range c.pick(quickSmallSizes, fullSmallSizes) {
		if v <= 64<<10 {
			sizes = append(sizes, v)
		}
	}
	t := &transferBuffers{d: d, n: uintptr(max(maxOf(sizes), 1))}
	var (
		q    *target.Queue
		orig target.StagingConfig
	)
	s := &benchSection{}
	s.setup = func() error {
		if err := t.setup(); err != nil {
			return err
		}
		orig = d.StagingConfig()
		var err error
		q, err = d.NewQueue()
		return err
	}
	s.teardown = func() {
		if q != nil {
			_ = q.Close()
		}
		d.SetStagingConfig(orig)
		t.teardown()
	}
	for _, series := range []string{"staged", "unstaged", "pinned source"} {
		for _, size := range sizes {
			series, size := series, uintptr(size)
			s.cases = append(s.cases, &benchCase{group: "small_copy", series: series, size: int64(size),
				run: func(budget time.Duration) (float64, int, error) {
					cfg := orig
					src := t.pageable
					switch series {
					case "staged":
						cfg.Threshold = max(cfg.Threshold, size)
					case "unstaged":
						cfg.Threshold = 0
					case "pinned source":
						var err error
						if src, err = t.host("pinned"); err != nil {
							return 0, 0, err
						}
					}
					d.SetStagingConfig(cfg)
					return measure(budget, func(n int) error {
						for range n {
							if err := target.MemcpyAsync(t.dev, src, size, d.ID, target.InitialDevice(), q); err != nil {
								return err
							}
							if err := q.Synchronize(context.Background()); err != nil {
								return err
							}
						}
						return nil
					})
				}})
		}
	}
	return s
}
