package target

import (
	"errors"
	"fmt"
	"github.com/ompalloc/ompalloc/internal/device"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// bounceChunk is the size of each of the two pinned buffers of a copy
// between two accelerators that cannot copy directly.
const bounceChunk = 4 << 20

// Memcpy copies n bytes from src on device srcDev to dst on device dstDev,
// between any two devices including the host. It is complete on return:
// later work on any queue of either device sees the bytes. A copy between
// two accelerators of the same plugin goes device to device when the driver
// says they reach each other (plugin.PeerCopier); otherwise it goes through
// two host buffers pinned for both devices, two chunks in flight. n == 0
// does nothing.
func Memcpy(dst, src, n uintptr, dstDev, srcDev int) error {
	if n == 0 {
		return nil
	}
	dd, sd, err := memcpyDevices(dst, src, n, dstDev, srcDev)
	if err != nil {
		return err
	}
	switch {
	case dd.host && sd.host:
		if err := dd.usable(); err != nil {
			return err
		}
		return hostCopy(dst, src, n)
	case sd.host:
		return dd.submit(dst, src, n, nil)
	case dd.host:
		return sd.retrieve(dst, src, n, nil)
	case dd == sd:
		return dd.exchange(dst, src, n, nil)
	}
	pc, ok, err := peerPath(sd, dd)
	if err != nil {
		return err
	}
	if ok {
		return copyPeer(pc, sd, dd, sd, dst, src, n, nil)
	}
	return bounce(dd, sd, dst, src, n)
}

// MemcpyAsync is Memcpy enqueued on q (omp_target_memcpy_async,
// cuMemcpyPeerAsync): the copy runs after the work issued on q before it and
// before the work issued on q after it, and may still be running when
// MemcpyAsync returns; q.Synchronize waits for it. q must be a queue of one
// of the two devices, of the accelerator when the other one is the host.
// Work on other queues is not ordered with the copy.
//
// Between two accelerators without a device-to-device path the bytes go
// through host memory: MemcpyAsync then waits for q's earlier work, copies
// and returns when the copy is complete (still in q's order).
func MemcpyAsync(dst, src, n uintptr, dstDev, srcDev int, q *Queue) error {
	if n == 0 {
		return nil
	}
	dd, sd, err := memcpyDevices(dst, src, n, dstDev, srcDev)
	if err != nil {
		return err
	}
	if q == nil || (q.dev != dd && q.dev != sd) {
		return fmt.Errorf("async memcpy from device %d to device %d: %w: the queue must belong to one of them", sd.ID, dd.ID, ErrInvalidArgument)
	}
	switch {
	case dd.host && sd.host:
		if err := q.synchronize(); err != nil {
			return err
		}
		return hostCopy(dst, src, n)
	case sd.host:
		return dd.submit(dst, src, n, q)
	case dd.host:
		return sd.retrieve(dst, src, n, q)
	case dd == sd:
		return dd.exchange(dst, src, n, q)
	}
	pc, ok, err := peerPath(q.dev, other(q.dev, dd, sd))
	if err != nil {
		return err
	}
	if ok {
		return copyPeer(pc, q.dev, dd, sd, dst, src, n, q)
	}
	if err := q.synchronize(); err != nil {
		return err
	}
	return bounce(dd, sd, dst, src, n)
}

// hostCopy copies between two host ranges the caller may not have bounded:
// memory the runtime does not know (omp_target_memcpy of a foreign pointer
// and an offset) is only known to be mapped when the copy does not fault,
// and a fault is an error matching ErrInvalidArgument, not the end of the
// process (cmem.CopyChecked).
func hostCopy(dst, src, n uintptr) error {
	if err := cmem.CopyChecked(dst, src, n); err != nil {
		return fmt.Errorf("host memcpy: %w: %w", ErrInvalidArgument, err)
	}
	return nil
}

func other(d, a, b *Device) *Device {
	if d == a {
		return b
	}
	return a
}

// memcpyDevices resolves and checks the two sides of a copy between devices.
func memcpyDevices(dst, src, n uintptr, dstDev, srcDev int) (dd, sd *Device, err error) {
	w := get()
	dd, err = w.device(dstDev)
	if err != nil {
		return nil, nil, fmt.Errorf("memcpy to %w", err)
	}
	sd, err = w.device(srcDev)
	if err != nil {
		return nil, nil, fmt.Errorf("memcpy from %w", err)
	}
	if dst == 0 || src == 0 || wraps(dst, n) || wraps(src, n) {
		return nil, nil, fmt.Errorf("memcpy of %d bytes from %#x to %#x: %w", n, src, dst, ErrInvalidArgument)
	}
	return dd, sd, nil
}

// peerPath returns on's PeerCopier when on and peer are accelerators of the
// same plugin whose driver copies between them directly.
func peerPath(on, peer *Device) (plugin.PeerCopier, bool, error) {
	if on.host || peer.host || on.plugin != peer.plugin {
		return nil, false, nil
	}
	pc, ok := on.impl.(plugin.PeerCopier)
	if !ok {
		return nil, false, nil
	}
	if err := on.usable(); err != nil {
		return nil, false, err
	}
	if err := peer.usable(); err != nil {
		return nil, false, err
	}
	can, err := pc.PeerAccess(peer.impl)
	if err != nil {
		return nil, false, fmt.Errorf("device %d: peer access to device %d: %w", on.ID, peer.ID, err)
	}
	return pc, can, nil
}

// copyPeer runs one device-to-device copy between two devices on on (one of
// them), synchronously or on q (a queue of on).
func copyPeer(pc plugin.PeerCopier, on, dd, sd *Device, dst, src, n uintptr, q *Queue) error {
	var err error
	if q == nil {
		err = pc.CopyPeer(dst, dd.impl, src, sd.impl, n, nil)
	} else {
		err = q.issue(func(qi plugin.QueueImpl) error { return pc.CopyPeer(dst, dd.impl, src, sd.impl, n, qi) }, pending{})
	}
	if err != nil {
		return fmt.Errorf("device %d: peer copy of %d bytes from %#x on device %d to %#x on device %d: %w", on.ID, n, src, sd.ID, dst, dd.ID, err)
	}
	if q != nil {
		dd.noteUse(dst, n, q)
		sd.noteUse(src, n, q)
	}
	return nil
}

// bounce copies between two accelerators that cannot copy directly,
// through two host buffers pinned for both devices, a chunk at a time with
// two chunks in flight: while the destination's queue writes chunk i from
// one buffer, the source's queue reads chunk i+1 into the other. Both
// copies of a chunk take the one-step pinned path; pageable memory is never
// used. It is complete on return.
func bounce(dd, sd *Device, dst, src, n uintptr) (err error) {
	fail := func(what string, err error) error {
		return fmt.Errorf("memcpy of %d bytes from device %d to device %d: %s: %w", n, sd.ID, dd.ID, what, err)
	}
	c, err := dl.C()
	if err != nil {
		return fail("bounce buffers", err)
	}
	chunk := min(n, bounceChunk)
	chunk = (chunk + pageSize - 1) &^ (pageSize - 1)
	size := 2 * chunk
	buf, err := c.Map(size)
	if err != nil {
		return fail("bounce buffers", err)
	}
	defer func() { _ = c.Unmap(buf, size) }()
	for i, d := range []*Device{sd, dd} {
		if _, err := d.LockMem(buf, size); err != nil {
			if i == 1 {
				_ = sd.UnlockMem(buf)
			}
			return fail("pin the bounce buffers", err)
		}
	}
	defer func() {
		err = errors.Join(err, sd.UnlockMem(buf), dd.UnlockMem(buf))
	}()
	sq, err := sd.NewQueue()
	if err != nil {
		return fail("bounce", err)
	}
	defer func() { err = errors.Join(err, sq.Close()) }()
	dq, err := dd.NewQueue()
	if err != nil {
		return fail("bounce", err)
	}
	defer func() { err = errors.Join(err, dq.Close()) }()

	bufs := [2]uintptr{buf, buf + chunk}
	at := func(i uintptr) (off, k uintptr) { off = i * chunk; return off, min(chunk, n-off) }
	chunks := (n + chunk - 1) / chunk
	if err := sd.retrieve(bufs[0], src, min(chunk, n), sq); err != nil {
		return err
	}
	if err := sq.synchronize(); err != nil {
		return err
	}
	for i := uintptr(0); i < chunks; i++ {
		off, k := at(i)
		if err := dd.submit(dst+off, bufs[i%2], k, dq); err != nil {
			return err
		}
		if i+1 < chunks {
			off, k := at(i + 1)
			if err := sd.retrieve(bufs[(i+1)%2], src+off, k, sq); err != nil {
				return errors.Join(err, dq.synchronize())
			}
		}
		// Chunk i+1 has landed in its buffer, and chunk i's buffer is free.
		if err := errors.Join(sq.synchronize(), dq.synchronize()); err != nil {
			return err
		}
	}
	return nil
}

// pageSize rounds the bounce buffers; any multiple of the real page works.
const pageSize = 64 << 10

func (d *Device) checkCopy(what string, dst, src, n uintptr) error {
	if err := d.usable(); err != nil {
		return err
	}
	if n == 0 || dst == 0 || src == 0 || wraps(dst, n) || wraps(src, n) {
		return fmt.Errorf("device %d: %s of %d bytes from %#x to %#x: %w", d.ID, what, n, src, dst, ErrInvalidArgument)
	}
	return nil
}

// wraps reports whether [p, p+n) runs past the end of the address space.
func wraps(p, n uintptr) bool { return p+n < p }

// pinned reports whether all of [p, p+n) lies in memory the registry knows
// as pinned for d. Lookups are lock-free and make no driver call.
func (d *Device) pinned(p, n uintptr) bool { return pinnedRange(d.reg, p, n) }

// pinnedRange reports whether [p, p+n) lies in one entry of reg.
func pinnedRange(reg *pinreg.Registry, p, n uintptr) bool {
	dev, ok := reg.Lookup(p)
	if !ok {
		return false
	}
	if n > 1 {
		end, ok := reg.Lookup(p + n - 1)
		if !ok || end-dev != n-1 {
			return false
		}
	}
	return true
}

// submit copies n bytes from host memory src to device memory dst; on q
// when q is not nil (it may still be running when submit returns), else
// synchronously. The host side takes, in order of preference: the one-step
// pinned path, when src lies in memory pinned for the device (locked or
// allocated by it); a pinned staging buffer, for small asynchronous copies
// (src may then be reused as soon as submit returns); a lock for the
// transfer's duration, when LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS asks for
// it; or the driver's pageable path. The Impl is always given host
// addresses for the host side: a driver finds its own translation of pinned
// memory (CUDA's copies take host pointers; HSA's plugin translates).
func (d *Device) submit(dst, src, n uintptr, q *Queue) error {
	if err := d.checkCopy("submit", dst, src, n); err != nil {
		return err
	}
	if err := d.checkQueue(q); err != nil {
		return err
	}
	if d.host {
		return d.copy(dst, src, n, plugin.HostToDevice, q, pending{})
	}
	if d.pinned(src, n) {
		// The copy reads src late: a free of it waits for the copy (alloc.FreeAfter).
		return d.copy(dst, src, n, plugin.HostToDevice, q, pending{use: hostRange{src, n}})
	}
	if q != nil && n <= d.pool.threshold() {
		if staged, err := d.submitStaged(dst, src, n, q); staged {
			return err
		}
	}
	return d.copyMapped(dst, src, n, src, plugin.HostToDevice, q)
}

// submitStaged copies src into a staging buffer and enqueues the copy from
// it; staged is false when no buffer could be had.
func (d *Device) submitStaged(dst, src, n uintptr, q *Queue) (staged bool, err error) {
	b, ok := d.pool.take(n)
	if !ok {
		// Before pinning a new buffer, see whether the queue's own are done:
		// one driver query per pool miss, none per hit.
		q.recycleIfDone()
		if b, ok = d.pool.take(n); !ok {
			if b, ok = d.pool.alloc(n); !ok {
				return false, nil
			}
		}
	}
	if err := hostCopy(b.p, src, n); err != nil {
		d.pool.put(b, false)
		return true, fmt.Errorf("device %d: %s of %d bytes from %#x (staged) to %#x: %w", d.ID, plugin.HostToDevice, n, src, dst, err)
	}
	// The queue gets the buffer only once the copy reading it is issued.
	err = q.issue(func(qi plugin.QueueImpl) error {
		return d.impl.Copy(dst, b.p, n, plugin.HostToDevice, qi)
	}, pending{buf: b})
	if err != nil {
		d.pool.put(b, false)
		return true, fmt.Errorf("device %d: %s of %d bytes from %#x (staged) to %#x: %w", d.ID, plugin.HostToDevice, n, src, dst, plugin.Cause(err))
	}
	d.noteUse(dst, n, q)
	return true, nil
}

// retrieve copies n bytes from device memory src to host memory dst; on q
// when q is not nil, else synchronously. A dst in memory pinned for the
// device takes the one-step pinned path; otherwise dst is locked for the
// transfer when LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS asks for it.
func (d *Device) retrieve(dst, src, n uintptr, q *Queue) error {
	if err := d.checkCopy("retrieve", dst, src, n); err != nil {
		return err
	}
	if err := d.checkQueue(q); err != nil {
		return err
	}
	if d.host {
		return d.copy(dst, src, n, plugin.DeviceToHost, q, pending{})
	}
	if d.pinned(dst, n) {
		return d.copy(dst, src, n, plugin.DeviceToHost, q, pending{use: hostRange{dst, n}})
	}
	return d.copyMapped(dst, src, n, dst, plugin.DeviceToHost, q)
}

// exchange copies n bytes between two places in d's memory; on q when q is
// not nil, else synchronously.
func (d *Device) exchange(dst, src, n uintptr, q *Queue) error {
	if err := d.checkCopy("exchange", dst, src, n); err != nil {
		return err
	}
	if err := d.checkQueue(q); err != nil {
		return err
	}
	return d.copy(dst, src, n, plugin.DeviceToDevice, q, pending{})
}

func (d *Device) checkQueue(q *Queue) error {
	if q != nil && q.dev != d {
		return fmt.Errorf("device %d: a queue of device %d: %w", d.ID, q.dev.ID, ErrInvalidArgument)
	}
	return nil
}

// copyMapped copies with the host buffer hostp locked for the transfer when
// the map mode asks for it; the lock is released when the copy completes
// (at once for a synchronous copy, by the queue otherwise). A queued copy
// whose host side another device of the plugin has pinned records the use
// (sharedUse), so that a free of that memory waits for the copy.
func (d *Device) copyMapped(dst, src, n, hostp uintptr, dir plugin.Direction, q *Queue) error {
	if d.mapMode == pinreg.MapOff {
		return d.copy(dst, src, n, dir, q, d.sharedUse(hostp, n, q))
	}
	_, locked, err := d.reg.LockMapped(hostp, n, d.mapMode)
	if err != nil {
		if d.mapMode == pinreg.MapMandatory {
			return fmt.Errorf("device %d: %s of %d bytes: lock host buffer %#x: %w", d.ID, dir, n, hostp, err)
		}
		return d.copy(dst, src, n, dir, q, d.sharedUse(hostp, n, q))
	}
	if !locked {
		return d.copy(dst, src, n, dir, q, d.sharedUse(hostp, n, q))
	}
	if q != nil {
		// Locked now, the driver reads or writes it late like any pinned memory.
		err := d.copy(dst, src, n, dir, q, pending{unlock: hostp, use: hostRange{hostp, n}})
		if err != nil {
			_ = d.reg.UnlockUnmapped(hostp, d.mapMode)
		}
		return err
	}
	err = d.copy(dst, src, n, dir, nil, pending{})
	return errors.Join(err, d.reg.UnlockUnmapped(hostp, d.mapMode))
}

// sharedUse is what a copy on q (nil: none) whose host side [p, p+n) is not
// in d's registry hands to the queue: the use of that range when a device
// of the same plugin has it in its registry. A vendor pins for all of its
// devices at once (CUDA registers PORTABLE, HSA locks for every GPU agent),
// so the driver treats such memory as pinned on d too and reads or writes it
// late, while d's registry knows nothing of it: without the use, a free of a
// pinned block of another device would hand the block out again under the
// copy. The lookups are lock-free; no driver call.
func (d *Device) sharedUse(p, n uintptr, q *Queue) pending {
	if q == nil || !device.SharedPinned(d.plugin, p, n) {
		return pending{}
	}
	return pending{use: hostRange{p, n}}
}

// copy runs one Impl copy, synchronously or on q, handing p to q once the
// copy is issued. A queued copy records q on the device-pool blocks it
// touches (noteDeviceSides).
func (d *Device) copy(dst, src, n uintptr, dir plugin.Direction, q *Queue, p pending) error {
	var err error
	if q == nil {
		err = d.impl.Copy(dst, src, n, dir, nil)
	} else {
		err = q.issue(func(qi plugin.QueueImpl) error { return d.impl.Copy(dst, src, n, dir, qi) }, p)
	}
	if err != nil {
		return fmt.Errorf("device %d: %s of %d bytes from %#x to %#x: %w", d.ID, dir, n, src, dst, plugin.Cause(err))
	}
	d.noteDeviceSides(dst, src, n, dir, q)
	return nil
}

// noteDeviceSides records q on the device-pool blocks of d that a copy in
// direction dir reads or writes, so that a free of one, on any queue,
// waits for the copy.
func (d *Device) noteDeviceSides(dst, src, n uintptr, dir plugin.Direction, q *Queue) {
	if q == nil {
		return
	}
	switch dir {
	case plugin.HostToDevice:
		d.noteUse(dst, n, q)
	case plugin.DeviceToHost:
		d.noteUse(src, n, q)
	case plugin.DeviceToDevice:
		d.noteUse(dst, n, q)
		d.noteUse(src, n, q)
	}
}
