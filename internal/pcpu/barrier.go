package pcpu

// HasBarrier reports whether Barrier is available. It is fixed at start-up:
// true on Linux where membarrier(2) with MEMBARRIER_CMD_PRIVATE_EXPEDITED
// could be registered, false elsewhere and in race builds (the race detector
// cannot see the ordering a barrier gives, so code must use atomics there).
var HasBarrier = !RaceEnabled && initBarrier()

// Barrier makes every thread of the process execute a full memory barrier
// before it returns (membarrier(2)): a thread running now is interrupted
// for it, one not running passes a barrier when it is scheduled. It turns a
// store-then-load handshake (Dekker's) asymmetric: the frequent side writes
// and reads with plain instructions, and the rare side pays a few
// microseconds here instead. Call only when HasBarrier is true.
//
// It never fails: where the kernel refuses membarrier after start (a
// seccomp filter installed later), it falls back to waiting for a
// stop-the-world, which orders the same stores at the cost of a garbage
// collection per call (BarrierRefused then says why).
func Barrier() { barrier() }

// BarrierRefused returns the error with which the kernel refused
// membarrier after it was registered (Barrier stops the world since), or
// nil.
func BarrierRefused() error { return barrierRefused() }
