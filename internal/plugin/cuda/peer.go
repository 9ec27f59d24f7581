package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

var _ plugin.PeerCopier = (*device)(nil)

// peerState is what a device knows about reaching another one.
type peerState int8

const (
	peerUnknown peerState = iota
	peerYes
	peerNo
)

// PeerAccess reports whether d and peer (another device of this driver)
// copy directly: both directions pass cuDeviceCanAccessPeer, and each
// context is given access to the other's memory (cuCtxEnablePeerAccess; an
// access already enabled counts, too many peers means no, and a direction
// enabled here before the other failed is disabled again), and to the
// blocks of the other's stream-ordered pool (cuMemPoolSetAccess, as
// PyTorch's enablePeerAccess does: pool memory does not follow
// cuCtxEnablePeerAccess). The answer is kept for the pair, in both devices,
// as LLVM's plugin keeps it.
func (d *device) PeerAccess(peer plugin.Impl) (bool, error) {
	o, ok := peer.(*device)
	if !ok || o.drv != d.drv || o == d {
		return false, nil
	}
	d.pmu.Lock()
	st := d.peers[o]
	d.pmu.Unlock()
	switch st {
	case peerYes:
		return true, nil
	case peerNo:
		return false, nil
	}
	drv := d.drv
	if drv.cuDeviceCanAccessPeer == 0 || drv.cuCtxEnablePeerAccess == 0 || drv.cuMemcpyPeerAsync == 0 {
		d.setPeer(o, peerNo)
		return false, nil
	}
	if err := d.Open(); err != nil {
		return false, err
	}
	if err := o.Open(); err != nil {
		return false, err
	}
	for _, pair := range [2][2]*device{{d, o}, {o, d}} {
		a, b := pair[0], pair[1]
		var can int32
		if err := drv.check("cuDeviceCanAccessPeer", call(drv.cuDeviceCanAccessPeer, uintptr(unsafe.Pointer(&can)), uintptr(a.dev), uintptr(b.dev))); err != nil {
			return false, fmt.Errorf("%v: peer access to %v: %w", a, b, err)
		}
		if can == 0 {
			d.setPeer(o, peerNo)
			return false, nil
		}
	}
	var enabled []*device // the contexts given access here, to the other one
	for _, pair := range [2][2]*device{{d, o}, {o, d}} {
		a, b := pair[0], pair[1]
		var r result
		err := a.withCtx("cuCtxEnablePeerAccess", func() result {
			r = call(drv.cuCtxEnablePeerAccess, b.ctx, 0)
			if r == cudaErrorPeerAlreadyEnabled || r == cudaErrorTooManyPeers {
				return cudaSuccess
			}
			return r
		})
		if err == nil && r == cudaSuccess {
			enabled = append(enabled, a)
		}
		if err != nil || r == cudaErrorTooManyPeers {
			// One direction is of no use without the other: give back the
			// peer slot the first one took (a device without NVSwitch has
			// eight).
			derr := d.disablePeers(enabled, o)
			if err != nil {
				return false, errors.Join(fmt.Errorf("%v: peer access to %v: %w", a, b, err), derr)
			}
			d.setPeer(o, peerNo)
			return false, derr
		}
	}
	d.setPeer(o, peerYes)
	// Each context may reach the other's cuMemAlloc memory now, but not
	// its pool's blocks: grant that too, per direction (a pool made later
	// is granted by MemPool). A failure leaves the pair unknown, to be
	// asked again.
	var errs []error
	for _, pair := range [2][2]*device{{d, o}, {o, d}} {
		if mp := pair[0].mp.Load(); mp != nil {
			errs = append(errs, mp.grant(pair[1]))
		}
	}
	if err := errors.Join(errs...); err != nil {
		d.setPeer(o, peerUnknown)
		return false, err
	}
	return true, nil
}

// disablePeers takes back the access PeerAccess enabled for each context in
// enabled to the other device of the pair d, o.
func (d *device) disablePeers(enabled []*device, o *device) error {
	if d.drv.cuCtxDisablePeerAccess == 0 {
		return nil
	}
	var errs []error
	for _, a := range enabled {
		b := o
		if a == o {
			b = d
		}
		errs = append(errs, a.withCtx("cuCtxDisablePeerAccess", func() result {
			return call(d.drv.cuCtxDisablePeerAccess, b.ctx)
		}))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%v: peer access to %v: %w", d, o, err)
	}
	return nil
}

func (d *device) setPeer(o *device, st peerState) {
	for _, pair := range [2][2]*device{{d, o}, {o, d}} {
		pair[0].pmu.Lock()
		if pair[0].peers == nil {
			pair[0].peers = map[*device]peerState{}
		}
		pair[0].peers[pair[1]] = st
		pair[0].pmu.Unlock()
	}
}

// CopyPeer copies n bytes from src on srcDev to dst on dstDev with
// cuMemcpyPeerAsync, on q's stream or, with q nil, on a stream of d's own
// that it synchronizes (complete on return). d is one of the two devices.
func (d *device) CopyPeer(dst uintptr, dstDev plugin.Impl, src uintptr, srcDev plugin.Impl, n uintptr, q plugin.QueueImpl) error {
	dd, ok1 := dstDev.(*device)
	sd, ok2 := srcDev.(*device)
	if !ok1 || !ok2 || (dd != d && sd != d) || dd.drv != d.drv || sd.drv != d.drv {
		return fmt.Errorf("%v: peer copy between %T and %T: %w", d, dstDev, srcDev, sentinel.ErrInvalidArgument)
	}
	if d.drv.cuMemcpyPeerAsync == 0 {
		return fmt.Errorf("%v: cuMemcpyPeerAsync missing in %s: %w", d, d.drv.lib.Path, ErrNotSupported)
	}
	for _, x := range []*device{dd, sd} {
		if err := x.Open(); err != nil {
			return err
		}
	}
	enqueue := func(s uintptr) result { return call(d.drv.cuMemcpyPeerAsync, dst, dd.ctx, src, sd.ctx, n, s) }
	var err error
	if q == nil {
		err = d.syncCopy("cuMemcpyPeerAsync", enqueue)
	} else {
		s, ok := q.(*Queue)
		if !ok || s.d != d {
			return fmt.Errorf("%v: peer copy on a queue of another device (%T): %w", d, q, sentinel.ErrInvalidArgument)
		}
		stream := s.handle()
		if stream == 0 {
			return fmt.Errorf("%v: peer copy: queue %w", d, ErrClosed)
		}
		err = d.withCtx("cuMemcpyPeerAsync", func() result { return enqueue(stream) })
	}
	if err != nil {
		return fmt.Errorf("%v: peer copy of %d bytes from %#x on %v to %#x on %v: %w", d, n, src, sd, dst, dd, err)
	}
	return nil
}
