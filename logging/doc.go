// Package logging routes ompalloc's warnings.
//
// Every package of the module (kmp, alloc, target and the device plugins)
// reports what it cannot return as an error — an environment variable that
// does not parse, bad input to a C-style kmp routine, an allocator
// destroyed with blocks still allocated, blocks that could not be pinned and
// came from the fallback, a Buffer dropped unfreed — through one hook. By
// default each warning is one line on stderr:
//
//	ompalloc: warning: OMP_ALLOCATOR="bogus": ...; using omp_default_mem_alloc
//
// SetLogger sends them to a *slog.Logger instead, one record per warning at
// slog.LevelWarn, its message the text after "ompalloc: warning: ", with the
// attributes "kind" (one of the strings below), "package" (the package that
// warned) and, where the warning is about an error, "err" (the error value,
// which errors.Is matches against the sentinels of alloc and target). A
// handler can so route them to the program's logger, count them by kind, or
// drop them (slog.DiscardHandler silences them all).
//
// # Kinds
//
// The "kind" attribute is a string, one of these (a handler compares it
// with the literal, as it would any slog attribute; the list is the
// contract, and new kinds are added to it):
//
//   - "env": an environment variable (OMP_ALLOCATOR, OMP_DEFAULT_DEVICE,
//     OMPALLOC_*) does not parse; its default is used.
//   - "bad_input": kmp was given bad input (an unknown handle, a bad
//     device number, a foreign pointer...) and returned nil, -1 or nothing,
//     as the C API it mirrors.
//   - "live_blocks": an allocator was destroyed with blocks still
//     allocated (they stay valid until freed).
//   - "pin_fallback": a pinned allocator could not pin and handed out
//     blocks from its fallback allocator, unpinned (once per allocator).
//   - "unfreed": an alloc.Buffer became unreachable without Free, or a
//     target.Pinned handle without Unpin (the garbage collector undid it).
//   - "hugetlb": hugetlb pages were asked for but could not be had (once
//     per process).
//   - "dropped_lock": user locks inside a pinned chunk were dropped when
//     the chunk was released.
//   - "driver": a GPU driver call failed where no caller can be told:
//     cuCtxPopCurrent after a call that succeeded (the call's result
//     stands; the goroutine keeps its OS thread, which ends with it).
//
// alloc.(*Allocator).Destroy with blocks still allocated returns an error
// matching alloc.ErrLiveBlocks and also warns through this hook (kind
// "live_blocks"), so that the report does not vanish under defer a.Destroy().
package logging
