package alloc

import (
	"fmt"
	"sync"

	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/internal/traitenv"
	"github.com/ompalloc/ompalloc/internal/warn"
)

var envOnce sync.Once

// applyEnv reads OMP_ALLOCATOR once, at first use, and sets the default
// allocator. Invalid values give one warning and leave
// omp_default_mem_alloc as the default.
func applyEnv() {
	def, _ := lookup(predef.DefaultMem)
	defaultAlloc.Store(def)
	v, ok := envvar.Lookup(envvar.Allocator) // blank: unset, as every variable
	if !ok {
		return
	}
	a, err := fromEnv(v)
	if err != nil {
		warn.Emit(warn.Env, "alloc", fmt.Sprintf("%v; using omp_default_mem_alloc", err), err)
		return
	}
	defaultAlloc.Store(a)
}

func fromEnv(v string) (*Allocator, error) {
	spec, err := traitenv.ParseEnv(v)
	if err != nil {
		return nil, err
	}
	if spec.Allocator != 0 {
		a, ok := lookup(handle(spec.Allocator))
		if !ok {
			return nil, fmt.Errorf("%s=%q: allocator %d is not available", envvar.Allocator, v, spec.Allocator)
		}
		return a, nil
	}
	a, err := NewFromTraits(spec.Memspace, spec.Traits)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", envvar.Allocator, v, err)
	}
	a.pinFb.from = envvar.Allocator + ": " // its pin fallback warning says so
	return a, nil
}
