package cuda

import (
	"fmt"

	"github.com/ompalloc/ompalloc/loader"
)

// Binding is the plugin's table of libcuda entry points, lent to this
// module's tools that call the driver straight: cmd/ompalloc's driver peak
// and internal/cmd/gpuprobe. So the module binds libcuda's symbols in one
// table (driver.table: one list, one _v2 rule, checked against the real
// library's exports by TestSymbolsExistInRealDriver), and the tools call
// the very library, and entry points, the plugin uses. It is internal: the
// package is, so no program outside this module can reach the driver
// through it.
type Binding struct {
	d      *driver
	byName map[string]uintptr
}

// Bound returns the binding of the library every CUDA plugin of the process
// uses (OMPALLOC_CUDA_LIBRARY, else libcuda.so.1), loading and binding it if
// no plugin has yet. It does not call cuInit.
func Bound() (*Binding, error) {
	d, err := defaultDriver.get()
	if err != nil {
		return nil, err
	}
	b := &Binding{d: d, byName: map[string]uintptr{}}
	for _, e := range d.table() {
		if *e.Addr == 0 {
			continue
		}
		name := e.Name
		if e.strict {
			name += e.Versions[0] // strict entries are bound to their _v2 name or not at all
		}
		b.byName[name] = *e.Addr
	}
	return b, nil
}

// Path is the library file.
func (b *Binding) Path() string { return b.d.lib.Path }

// Sym returns the address bound for name, spelt as the library exports it
// ("cuMemAllocHost_v2", "cuStreamCreate"). A name the table does not bind,
// or an optional entry point this library lacks, is an error wrapping
// loader.ErrSymbolMissing.
func (b *Binding) Sym(name string) (uintptr, error) {
	if p := b.byName[name]; p != 0 {
		return p, nil
	}
	return 0, fmt.Errorf("%s in %s (not in the CUDA plugin's symbol table, or not exported): %w", name, b.d.lib.Path, loader.ErrSymbolMissing)
}

// ErrorName is the driver's name for a CUresult (cuGetErrorName), or the
// name known here.
func (b *Binding) ErrorName(code int) string { return b.d.errorName(code) }
