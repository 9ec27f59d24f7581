// Package scripttest checks bench/alloc/run.sh, the side-by-side benchmark of
// ompalloc's allocation engine against LLVM libomp 16, on saved outputs: that
// it keeps the best figure of each case, matches the Go and C names, and
// prints ours, theirs and the ratio. It has no code of its own, only tests,
// so no program can import it. (It lives in a
// subdirectory because a Go package may not sit beside libomp_bench.c.)
package scripttest
