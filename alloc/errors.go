package alloc

import (
	"errors"

	"github.com/ompalloc/ompalloc/internal/heap"
	"github.com/ompalloc/ompalloc/internal/sentinel"
	"github.com/ompalloc/ompalloc/traits"
)

// Errors returned by this package; test with errors.Is. Every error the
// package returns matches one of them (errors from a device match ErrDevice
// and, beneath it, the target package's own).
var (
	// ErrInvalidTrait: a trait key or value is not allowed (see package traits).
	ErrInvalidTrait = traits.ErrInvalidTrait
	// ErrInvalidArgument: a bad size, alignment, memory space or handle
	// (the same variable as target.ErrInvalidArgument).
	ErrInvalidArgument = sentinel.ErrInvalidArgument
	// ErrPoolExhausted: the allocator's pool_size quota has no room.
	ErrPoolExhausted = errors.New("allocator pool exhausted")
	// ErrOutOfMemory: the memory behind the allocator could not be had.
	ErrOutOfMemory = heap.ErrNoMemory
	// ErrPinFailed: memory could not be page-locked (RLIMIT_MEMLOCK, the
	// pinned-bytes limit, or the device refused).
	ErrPinFailed = errors.New("cannot pin memory")
	// ErrNotSupported: the memory space cannot be served on this machine.
	ErrNotSupported = errors.New("not supported")
	// ErrInvalidPointer: the pointer was not returned by this runtime, or
	// points inside a block.
	ErrInvalidPointer = errors.New("invalid pointer")
	// ErrDoubleFree: the block was already freed.
	ErrDoubleFree = heap.ErrDoubleFree
	// ErrTooLarge: the size asked is beyond what any machine could back
	// (over 64 TiB).
	ErrTooLarge = heap.ErrTooLarge
	// ErrDevice: the device behind a target memory space failed or does
	// not exist; the error wraps the device layer's (target.ErrBadDevice, a
	// driver's).
	ErrDevice = errors.New("device error")
	// ErrOverflow: nmemb*size overflows.
	ErrOverflow = errors.New("size overflow")
	// ErrDestroyed: the allocator was destroyed.
	ErrDestroyed = errors.New("allocator destroyed")
	// ErrLiveBlocks: an allocator was destroyed while blocks were still
	// allocated from it; they stay valid until freed.
	ErrLiveBlocks = errors.New("allocator destroyed with live blocks")
)
