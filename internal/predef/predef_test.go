package predef_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/memspace"
)

func TestPredefinedAllocators(t *testing.T) {
	// Handles from LLVM's omp.h, with the memory space each draws from.
	cases := []struct {
		name string
		h    uintptr
		ms   memspace.ID
	}{
		{"omp_default_mem_alloc", 1, memspace.Default},
		{"omp_large_cap_mem_alloc", 2, memspace.LargeCap},
		{"omp_const_mem_alloc", 3, memspace.Const},
		{"omp_high_bw_mem_alloc", 4, memspace.HighBw},
		{"omp_low_lat_mem_alloc", 5, memspace.LowLat},
		{"omp_cgroup_mem_alloc", 6, memspace.Default},
		{"omp_pteam_mem_alloc", 7, memspace.Default},
		{"omp_thread_mem_alloc", 8, memspace.Default},
		{"llvm_omp_target_host_mem_alloc", 100, memspace.TargetHost},
		{"llvm_omp_target_shared_mem_alloc", 101, memspace.TargetShared},
		{"llvm_omp_target_device_mem_alloc", 102, memspace.TargetDevice},
	}
	var hs []uintptr
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, ok := predef.ByName(c.name)
			require.True(t, ok)
			require.Equal(t, c.h, h)
			require.Equal(t, c.name, predef.Name(c.h))
			ms, ok := predef.Memspace(c.h)
			require.True(t, ok)
			require.Equal(t, c.ms, ms)
		})
		hs = append(hs, c.h)
	}
	require.Equal(t, hs, predef.Handles())
}

func TestAllocatorLookupsRefuseOthers(t *testing.T) {
	for _, n := range []string{"", "omp_null_allocator", "OMP_DEFAULT_MEM_ALLOC", "omp_default_mem_space", "omp_default_mem_alloc_xyz", "1"} {
		_, ok := predef.ByName(n)
		require.False(t, ok, n)
	}
	require.Equal(t, "omp_null_allocator", predef.Name(0))
	require.Equal(t, "allocator#9", predef.Name(9))
	require.Equal(t, "allocator#3221230128", predef.Name(0xc0001230))
	_, ok := predef.Memspace(0)
	require.False(t, ok)
	_, ok = predef.Memspace(9)
	require.False(t, ok)
}

func TestMemspaceAllocator(t *testing.T) {
	want := map[memspace.ID]uintptr{
		memspace.Default: 1, memspace.LargeCap: 2, memspace.Const: 3, memspace.HighBw: 4,
		memspace.LowLat: 5, memspace.TargetHost: 100, memspace.TargetShared: 101, memspace.TargetDevice: 102,
	}
	for _, ms := range memspace.All() {
		h, ok := predef.ForMemspace(ms)
		require.True(t, ok, "%v", ms)
		require.Equal(t, want[ms], h, "%v", ms)
		back, _ := predef.Memspace(h)
		require.Equal(t, ms, back)
	}
	_, ok := predef.ForMemspace(memspace.Null)
	require.False(t, ok)
	_, ok = predef.ForMemspace(memspace.ID(0x1000))
	require.False(t, ok)
}

func ExampleByName() {
	h, ok := predef.ByName("omp_high_bw_mem_alloc")
	ms, _ := predef.Memspace(h)
	fmt.Println(h, ok, predef.Name(h), ms, memspace.Describe(ms).BackedBy)
	// Output: 4 true omp_high_bw_mem_alloc omp_high_bw_mem_space omp_default_mem_space
}
