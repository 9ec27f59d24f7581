package main

import (
	"fmt"
	"sort"

	"github.com/ebitengine/purego"

	"github.com/ompalloc/ompalloc/internal/dl"
)

// refSymbol is the function -ref's library must export (glibc_pair.c):
// double glibc_pairs_ns(size_t size, long n), n malloc+free pairs of size
// bytes, returning the thread CPU time per pair in ns taken inside C.
const refSymbol = "glibc_pairs_ns"

// reference is glibc's pair for one case: its name in run.sh's table and
// the size it allocates.
type reference struct {
	name string
	size uintptr
}

// references maps each case that has a glibc counterpart to it; the others
// (pinned-64MiB, lock-hit) have none, and -ref with them is a usage error.
var references = map[string]reference{
	"default-64":   {"glibc-64", 64},
	"align64-64":   {"glibc-64", 64},
	"default-4MiB": {"glibc-4194304", 4 << 20},
}

// refFunc times n pairs of size bytes in C and returns ns per pair (a
// negative value when C refused: n < 1, size 0, or a failed malloc).
type refFunc func(size uintptr, n int) float64

// loadRef opens the shared library at path and binds its refSymbol. The
// errors name the path and what was missing; nothing here panics (dl's
// Open and Sym return errors, and RegisterFunc's own panics are for a
// wrong Go signature or a nil address, which Sym has ruled out).
func loadRef(path string) (refFunc, error) {
	lib, err := dl.Open(dl.Spec{Name: "reference", Candidates: []string{path}})
	if err != nil {
		return nil, err
	}
	addr, err := lib.Sym(refSymbol)
	if err != nil {
		return nil, fmt.Errorf("reference: %w (build bench/icount/glibc_pair.c with gcc -O2 -fno-builtin -shared -fPIC)", err)
	}
	var f refFunc
	purego.RegisterFunc(&f, addr)
	return f, nil
}

// median returns the median of xs (the mean of the two middle values for
// an even count); xs is sorted in place.
func median(xs []float64) float64 {
	sort.Float64s(xs)
	m := len(xs) / 2
	if len(xs)%2 == 0 {
		return (xs[m-1] + xs[m]) / 2
	}
	return xs[m]
}
