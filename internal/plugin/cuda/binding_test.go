package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/loader"
)

// The tools' binding is the plugin's own table: the same library and the
// same addresses, by the names the library exports; a name the table does
// not bind is refused by name, never looked up behind the table's back.
func TestBindingIsThePluginsTable(t *testing.T) {
	needFake(t)
	b, err := Bound()
	require.NoError(t, err)
	d, err := defaultDriver.get()
	require.NoError(t, err)
	require.Equal(t, d.lib.Path, b.Path())
	for name, want := range map[string]uintptr{
		"cuMemcpyHtoDAsync_v2":         d.cuMemcpyHtoDAsync,
		"cuDevicePrimaryCtxRelease_v2": d.cuDevicePrimaryCtxRelease,
		"cuStreamCreate":               d.cuStreamCreate,
		"cuMemAllocHost_v2":            d.tools.cuMemAllocHost,
	} {
		got, err := b.Sym(name)
		require.NoError(t, err, name)
		require.NotZero(t, got, name)
		require.Equal(t, want, got, name)
	}
	_, err = b.Sym("cuMemcpyHtoDAsync") // the unversioned entry has another ABI
	require.ErrorIs(t, err, loader.ErrSymbolMissing)
	_, err = b.Sym("cuLaunchKernel")
	require.ErrorIs(t, err, loader.ErrSymbolMissing)
	require.Equal(t, "CUDA_ERROR_OUT_OF_MEMORY", b.ErrorName(2))
}
