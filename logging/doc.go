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
// attributes "kind" (one of the Kind constants), "package" (the package that
// warned) and, where the warning is about an error, "err" (the error value,
// which errors.Is matches against the sentinels of alloc and target). A
// handler can so route them to the program's logger, count them by kind, or
// drop them (slog.DiscardHandler silences them all).
//
// alloc.(*Allocator).Destroy with blocks still allocated returns an error
// matching alloc.ErrLiveBlocks and also warns through this hook (kind
// live_blocks), so that the report does not vanish under defer a.Destroy().
package logging
