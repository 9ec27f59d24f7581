package memspace_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/memspace"
)

func TestNumbersMatchLLVMOmpH(t *testing.T) {
	// Values from LLVM's omp.h (omp_memspace_handle_t).
	cases := []struct {
		id   memspace.ID
		want uintptr
		name string
	}{
		{memspace.Null, 0, "omp_null_mem_space"},
		{memspace.LargeCap, 1, "omp_large_cap_mem_space"},
		{memspace.Const, 2, "omp_const_mem_space"},
		{memspace.HighBw, 3, "omp_high_bw_mem_space"},
		{memspace.LowLat, 4, "omp_low_lat_mem_space"},
		{memspace.Default, 99, "omp_default_mem_space"},
		{memspace.TargetHost, 100, "llvm_omp_target_host_mem_space"},
		{memspace.TargetShared, 101, "llvm_omp_target_shared_mem_space"},
		{memspace.TargetDevice, 102, "llvm_omp_target_device_mem_space"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, uintptr(c.id))
			require.Equal(t, c.name, c.id.String())
			got, ok := memspace.ByName(c.name)
			require.True(t, ok)
			require.Equal(t, c.id, got)
		})
	}
}

func TestByNameIsExact(t *testing.T) {
	for _, name := range []string{
		"", "omp_default_mem_spac", "omp_default_mem_space ", "OMP_DEFAULT_MEM_SPACE",
		"default", "omp_default_mem_alloc", "omp_default_mem_space:alignment=64",
	} {
		id, ok := memspace.ByName(name)
		require.False(t, ok, "%q", name)
		require.Equal(t, memspace.Null, id)
	}
}

// All lists the predefined memory spaces, IsTarget the driver-backed ones,
// Exists both and the runtime-made ones (none made here: a handle in the
// runtime range that no call made is no memory space).
func TestAllExistsAndIsTarget(t *testing.T) {
	cases := []struct {
		id            memspace.ID
		valid, target bool
		exists        bool
	}{
		{memspace.Null, false, false, false},
		{memspace.Default, true, false, true},
		{memspace.LargeCap, true, false, true},
		{memspace.Const, true, false, true},
		{memspace.HighBw, true, false, true},
		{memspace.LowLat, true, false, true},
		{memspace.TargetHost, true, true, true},
		{memspace.TargetShared, true, true, true},
		{memspace.TargetDevice, true, true, true},
		{5, false, false, false},
		{98, false, false, false},
		{103, false, false, false},
		{memspace.ID(0x1000) - 1, false, false, false},
		{memspace.ID(0x1000) + 1<<20, false, false, false}, // in the runtime range, never made (tests here make a few)
		{memspace.ID(0x1000) + 1<<30, false, false, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(uintptr(c.id)), func(t *testing.T) {
			require.Equal(t, c.valid, slices.Contains(memspace.All(), c.id))
			require.Equal(t, c.target, c.id.IsTarget())
			require.Equal(t, c.exists, c.id.Exists())
		})
	}
}

func TestStringOfUnknownHandles(t *testing.T) {
	require.Equal(t, "memspace(5)", memspace.ID(5).String())
	require.Equal(t, "memspace(runtime 0x1002)", (memspace.ID(0x1000) + 2).String())
}

func TestAll(t *testing.T) {
	all := memspace.All()
	require.Len(t, all, 8)
	require.Equal(t, memspace.Default, all[0], "default comes first")
	seen := map[memspace.ID]bool{}
	for _, id := range all {
		require.True(t, id.Exists(), "%v", id)
		require.False(t, seen[id], "duplicate %v", id)
		seen[id] = true
		back, ok := memspace.ByName(id.String())
		require.True(t, ok)
		require.Equal(t, id, back)
	}
	all[0] = memspace.Null
	require.Equal(t, memspace.Default, memspace.All()[0], "All returns a fresh slice")
}

func TestDescribe(t *testing.T) {
	// high_bw and large_cap are served by their own memory where this
	// host has it (HBM, capacity nodes, as memspace.Placement reads the
	// topology), else by default host memory: the decision documented in
	// doc.go, as libgomp does.
	own := func(id memspace.ID) memspace.ID {
		if _, restricted, _ := memspace.Placement(id); restricted {
			return id
		}
		return memspace.Default
	}
	cases := []struct {
		id       memspace.ID
		kind     string
		backedBy memspace.ID
	}{
		{memspace.Default, "host", memspace.Default},
		{memspace.LargeCap, "host", own(memspace.LargeCap)},
		{memspace.HighBw, "host", own(memspace.HighBw)},
		{memspace.LowLat, "host", memspace.Default},
		{memspace.Const, "host", memspace.Default},
		{memspace.TargetHost, "target-host", memspace.TargetHost},
		{memspace.TargetShared, "target-shared", memspace.TargetShared},
		{memspace.TargetDevice, "target-device", memspace.TargetDevice},
		{memspace.Null, "unknown", memspace.Null},
		{memspace.ID(0x1000), "unknown", memspace.ID(0x1000)},
	}
	for _, c := range cases {
		t.Run(c.id.String(), func(t *testing.T) {
			b := memspace.Describe(c.id)
			require.Equal(t, c.id, b.ID)
			require.Equal(t, c.kind, b.Kind)
			require.Equal(t, c.backedBy, b.BackedBy)
			require.NotEmpty(t, b.Memory)
			switch {
			case c.backedBy == memspace.Default && c.id != memspace.Default:
				require.True(t, strings.HasPrefix(b.Memory, "default host memory"), b.Memory)
			case c.id == memspace.HighBw || c.id == memspace.LargeCap:
				nodes, _, _ := memspace.Placement(c.id)
				require.Equal(t, nodes, b.Nodes)
				require.Contains(t, b.Memory, "memory on NUMA nodes "+numa.FormatList(nodes))
			}
		})
	}
}

func ExampleDescribe() {
	// What serves high_bw depends on the host (HBM nodes, or default
	// memory); its kind does not.
	for _, id := range []memspace.ID{memspace.Default, memspace.HighBw, memspace.TargetDevice} {
		b := memspace.Describe(id)
		fmt.Printf("%s: %s\n", id, b.Kind)
	}
	// Output:
	// omp_default_mem_space: host
	// omp_high_bw_mem_space: host
	// llvm_omp_target_device_mem_space: target-device
}

func ExampleByName() {
	id, ok := memspace.ByName("omp_large_cap_mem_space")
	fmt.Println(uintptr(id), ok, id.Exists())
	// Output: 1 true true
}
