//go:build linux || darwin

package dl

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/ompalloc/ompalloc/loader"
)

// The feature errors live in the public package loader, so that users can
// test for them (errors.Is) without reaching the mechanics here.
var (
	ErrNotFound      = loader.ErrNotFound
	ErrDisabled      = loader.ErrDisabled
	ErrInitFailed    = loader.ErrInitFailed
	ErrSymbolMissing = loader.ErrSymbolMissing
)

// Spec says how to find a library.
type Spec struct {
	Name       string   // for messages: "CUDA driver"
	Candidates []string // tried in order: "libcuda.so.1", "libcuda.so"
	EnvPath    string   // a variable whose value, if set, is the only candidate
	EnvDisable string   // a variable that, set to 1/true/yes/on, disables the library
}

// Library is an opened shared library. It is never closed.
type Library struct {
	Name   string
	Path   string // the candidate that opened
	handle uintptr
}

// Open opens the first candidate of spec that loads. Errors wrap ErrDisabled
// or ErrNotFound and list every candidate tried with dlerror's reason.
func Open(spec Spec) (*Library, error) {
	if spec.EnvDisable != "" && truthy(os.Getenv(spec.EnvDisable)) {
		return nil, fmt.Errorf("%s: %w by %s=%s", spec.Name, ErrDisabled, spec.EnvDisable, os.Getenv(spec.EnvDisable))
	}
	cands := spec.Candidates
	if spec.EnvPath != "" {
		if p := os.Getenv(spec.EnvPath); p != "" {
			cands = []string{p}
		}
	}
	var why []string
	for _, c := range cands {
		h, err := dlopen(c)
		if err == nil {
			return &Library{Name: spec.Name, Path: c, handle: h}, nil
		}
		why = append(why, err.Error())
	}
	return nil, fmt.Errorf("%s: %w (%s)", spec.Name, ErrNotFound, strings.Join(why, "; "))
}

// Sym returns the address of name. A missing symbol is an error wrapping
// ErrSymbolMissing that names the library and the symbol; it never panics.
func (l *Library) Sym(name string) (uintptr, error) {
	if p := dlsym(l.handle, name); p != 0 {
		return p, nil
	}
	return 0, fmt.Errorf("%s in %s: %w", name, l.Path, ErrSymbolMissing)
}

// Symbol is one entry of a symbol table.
type Symbol struct {
	Name     string   // the base name: "cuMemAlloc"
	Addr     *uintptr // where the address is stored
	Optional bool     // absence leaves *Addr zero instead of failing Bind
	Versions []string // suffixes tried first, in order: {"_v2"}
}

// Bind resolves every symbol of the table. For each, the versioned names are
// tried before the base name. A missing required symbol fails the whole bind
// with an error naming it; missing optional ones are left zero.
func (l *Library) Bind(table []Symbol) error {
	var missing []string
	for _, s := range table {
		*s.Addr = 0
		for _, v := range append(append([]string(nil), s.Versions...), "") {
			if p := dlsym(l.handle, s.Name+v); p != 0 {
				*s.Addr = p
				break
			}
		}
		if *s.Addr == 0 && !s.Optional {
			missing = append(missing, s.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s in %s: %w", strings.Join(missing, ", "), l.Path, ErrSymbolMissing)
	}
	return nil
}

func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// Lazy opens a library at first use, once, and caches the result, absence
// included.
type Lazy struct {
	Spec Spec
	once sync.Once
	lib  *Library
	err  error
}

// Get returns the library or the cached reason it is absent.
func (z *Lazy) Get() (*Library, error) {
	z.once.Do(func() { z.lib, z.err = Open(z.Spec) })
	return z.lib, z.err
}
