package traitenv_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/internal/traitenv"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// The accepted cases port the semantics of LLVM's OMP_ALLOCATOR tests
// (openmp/runtime/test: omp_alloc_env*, the pinned env run) and libgomp's
// allocator env tests (libgomp.c/alloc-*), in our own words.
func TestParseEnvAccepted(t *testing.T) {
	tr := func(k traits.Key, v uintptr) traits.Trait { return traits.Trait{Key: k, Value: v} }
	cases := []struct {
		name  string
		value string
		want  traitenv.EnvSpec
	}{
		// A predefined allocator name sets that allocator as the default; we
		// accept high_bw and large_cap without memkind (doc.go of memspace).
		{"high_bw allocator", "omp_high_bw_mem_alloc", traitenv.EnvSpec{Allocator: 4, Memspace: memspace.HighBw}},
		{"cgroup allocator", "omp_cgroup_mem_alloc", traitenv.EnvSpec{Allocator: 6, Memspace: memspace.Default}},
		{"large_cap allocator", "omp_large_cap_mem_alloc", traitenv.EnvSpec{Allocator: 2, Memspace: memspace.LargeCap}},
		{"const allocator", "omp_const_mem_alloc", traitenv.EnvSpec{Allocator: 3, Memspace: memspace.Const}},
		{"target host allocator", "llvm_omp_target_host_mem_alloc", traitenv.EnvSpec{Allocator: 100, Memspace: memspace.TargetHost}},
		// A bare memory space maps to its predefined allocator (libgomp).
		{"bare default space", "omp_default_mem_space", traitenv.EnvSpec{Allocator: 1, Memspace: memspace.Default}},
		{"bare large_cap space", "omp_large_cap_mem_space", traitenv.EnvSpec{Allocator: 2, Memspace: memspace.LargeCap}},
		{
			"large_cap with alignment and pinned",
			"omp_large_cap_mem_space:alignment=16,pinned=true",
			traitenv.EnvSpec{Memspace: memspace.LargeCap, Traits: []traits.Trait{tr(traits.Alignment, 16), tr(traits.Pinned, traits.True)}},
		},
		{
			"pool with allocator fallback",
			"omp_high_bw_mem_space:pool_size=1048576,fallback=allocator_fb,fb_data=omp_low_lat_mem_alloc",
			traitenv.EnvSpec{Memspace: memspace.HighBw, Traits: []traits.Trait{
				tr(traits.PoolSize, 1048576), tr(traits.Fallback, traits.AllocatorFb), tr(traits.FbData, 5)}},
		},
		{"pinned", "omp_default_mem_space:pinned=true", traitenv.EnvSpec{Memspace: memspace.Default, Traits: []traits.Trait{tr(traits.Pinned, traits.True)}}},
		{
			"white space around the value and the tokens",
			"  omp_default_mem_space:alignment=512, pinned = false ,access=all  ",
			traitenv.EnvSpec{Memspace: memspace.Default, Traits: []traits.Trait{
				tr(traits.Alignment, 512), tr(traits.Pinned, traits.False), tr(traits.Access, traits.All)}},
		},
		{
			"case is ignored",
			"OMP_Default_Mem_Space:SYNC_HINT=Uncontended,Fallback=NULL_FB,Pinned=TRUE",
			traitenv.EnvSpec{Memspace: memspace.Default, Traits: []traits.Trait{
				tr(traits.SyncHint, traits.Uncontended), tr(traits.Fallback, traits.NullFb), tr(traits.Pinned, traits.True)}},
		},
		{"case is ignored for allocators", "OMP_THREAD_MEM_ALLOC", traitenv.EnvSpec{Allocator: 8, Memspace: memspace.Default}},
		{
			"every env key",
			"omp_low_lat_mem_space:sync_hint=serialized,alignment=64,access=thread,pool_size=4096,fallback=abort_fb,fb_data=omp_default_mem_alloc,pinned=false,partition=interleaved",
			traitenv.EnvSpec{Memspace: memspace.LowLat, Traits: []traits.Trait{
				tr(traits.SyncHint, traits.Serialized), tr(traits.Alignment, 64), tr(traits.Access, traits.Thread),
				tr(traits.PoolSize, 4096), tr(traits.Fallback, traits.AbortFb), tr(traits.FbData, 1),
				tr(traits.Pinned, traits.False), tr(traits.Partition, traits.Interleaved)}},
		},
		{
			"duplicate key kept in order (last wins in FromList)",
			"omp_default_mem_space:alignment=32,alignment=128",
			traitenv.EnvSpec{Memspace: memspace.Default, Traits: []traits.Trait{tr(traits.Alignment, 32), tr(traits.Alignment, 128)}},
		},
		{
			"OpenMP 6.0 access values",
			"omp_default_mem_space:access=memspace",
			traitenv.EnvSpec{Memspace: memspace.Default, Traits: []traits.Trait{tr(traits.Access, traits.Memspace)}},
		},
		{
			"partition blocked",
			"omp_default_mem_space:partition=blocked",
			traitenv.EnvSpec{Memspace: memspace.Default, Traits: []traits.Trait{tr(traits.Partition, traits.Blocked)}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := traitenv.ParseEnv(c.value)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
			_, err = traits.FromList(got.Traits)
			require.NoError(t, err)
			again, err := traitenv.ParseEnv(got.String())
			require.NoError(t, err, got.String())
			require.Equal(t, got, again)
		})
	}
}

func TestParseEnvRejected(t *testing.T) {
	cases := []struct {
		name, value string
		reason      string // substring of the error
		trait       bool   // also wraps ErrInvalidTrait
	}{
		{"empty", "", "empty value", false},
		{"blank", "   ", "empty value", false},
		{"number", "111", `unknown allocator or memory space "111"`, false},
		{"numeric handle", "3", `unknown allocator or memory space "3"`, false},
		{"trailing junk", "omp_default_mem_alloc_xyz", `unknown allocator or memory space "omp_default_mem_alloc_xyz"`, false},
		{"null allocator", "omp_null_allocator", "unknown allocator or memory space", false},
		{"null memspace", "omp_null_mem_space", "unknown allocator or memory space", false},
		{"null memspace with traits", "omp_null_mem_space:pinned=true", `unknown memory space "omp_null_mem_space"`, false},
		{"unknown memspace with traits", "omp_fast_mem_space:pinned=true", `unknown memory space "omp_fast_mem_space"`, false},
		{"allocator with traits", "omp_default_mem_alloc:pinned=true", "traits follow a memory space, not an allocator", false},
		{"nothing after colon", "omp_default_mem_space:", `no traits after "omp_default_mem_space:"`, false},
		{"blank after colon", "omp_default_mem_space:  ", "no traits after", false},
		{"empty item", "omp_default_mem_space:pinned=true,,alignment=8", "empty trait in the list", false},
		{"trailing comma", "omp_default_mem_space:pinned=true,", "empty trait in the list", false},
		{"no equals", "omp_default_mem_space:pinned", `trait "pinned" has no value`, false},
		{"missing value at the end", "omp_const_mem_space:alignment=3,pinned=", `missing value for trait "pinned"`, false},
		{"missing key", "omp_default_mem_space:=true", "missing trait name", false},
		{"unknown key", "omp_default_mem_space:colour=red", `unknown trait "colour"`, false},
		{"omp_atk_ prefixed key", "omp_default_mem_space:omp_atk_pinned=true", `unknown trait "omp_atk_pinned"`, false},
		{"non-env key", "omp_default_mem_space:pin_device=0", `trait "pin_device" cannot be set through OMP_ALLOCATOR`, false},
		{"bad access name", "omp_const_mem_space:access=none,pinned=false", `access="none": unknown value "none"`, true},
		{"bad sync_hint", "omp_default_mem_space:sync_hint=sometimes", `unknown value "sometimes" (want one of contended, uncontended, serialized, private)`, true},
		{"bad fallback", "omp_default_mem_space:fallback=retry", `unknown value "retry"`, true},
		{"bad partition", "omp_default_mem_space:partition=striped", `unknown value "striped"`, true},
		{"pinned yes", "omp_default_mem_space:pinned=yes", `unknown value "yes" (want one of true, false)`, true},
		{"pinned 1", "omp_default_mem_space:pinned=1", `unknown value "1"`, true},
		{"alignment not a power of two", "omp_default_mem_space:alignment=3", "alignment=3: alignment must be a power of two", true},
		{"alignment zero", "omp_default_mem_space:alignment=0", "alignment=0: alignment must be a power of two", true},
		{"alignment negative", "omp_default_mem_space:alignment=-8", `"-8" is not a decimal number`, true},
		{"alignment plus sign", "omp_default_mem_space:alignment=+8", `"+8" is not a decimal number`, true},
		{"alignment hex", "omp_default_mem_space:alignment=0x40", `"0x40" is not a decimal number`, true},
		{"pool_size suffix", "omp_default_mem_space:pool_size=1M", `"1M" is not a decimal number of bytes`, true},
		{"pool_size underscore", "omp_default_mem_space:pool_size=1_000", `"1_000" is not a decimal number`, true},
		{"pool_size zero", "omp_default_mem_space:pool_size=0", "pool_size=0: must be greater than zero", true},
		{"pool_size overflow", "omp_default_mem_space:pool_size=99999999999999999999999", "is too large", true},
		{"fb_data not an allocator", "omp_default_mem_space:fallback=allocator_fb,fb_data=mine", `"mine" is not a predefined allocator name`, true},
		{"fb_data a number", "omp_default_mem_space:fallback=allocator_fb,fb_data=4", `"4" is not a predefined allocator name`, true},
		{"allocator_fb without fb_data", "omp_default_mem_space:fallback=allocator_fb", "fallback=allocator_fb: allocator_fb needs an omp_atk_fb_data trait", true},
		{"only ASCII case folds", "omp_default_mem_space:partition=bloc\u212aed", "unknown value \"bloc\u212aed\"", true},
		{"value with colon", "omp_default_mem_space:pinned=true:alignment=8", `unknown value "true:alignment=8"`, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := traitenv.ParseEnv(c.value)
			require.Error(t, err)
			require.Equal(t, traitenv.EnvSpec{}, got)
			require.ErrorIs(t, err, traitenv.ErrInvalidEnv)
			require.Equal(t, c.trait, errors.Is(err, traits.ErrInvalidTrait))
			require.ErrorContains(t, err, "OMP_ALLOCATOR=")
			require.ErrorContains(t, err, c.reason)
			var ee *traitenv.EnvError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, c.value, ee.Value)
		})
	}
}

func TestEnvSpecString(t *testing.T) {
	s, err := traitenv.ParseEnv("omp_high_bw_mem_space:Pool_Size=1048576,fallback=allocator_fb,fb_data=omp_low_lat_mem_alloc")
	require.NoError(t, err)
	require.Equal(t, "omp_high_bw_mem_space:pool_size=1048576,fallback=allocator_fb,fb_data=omp_low_lat_mem_alloc", s.String())
	s, err = traitenv.ParseEnv("omp_low_lat_mem_space")
	require.NoError(t, err)
	require.Equal(t, "omp_low_lat_mem_alloc", s.String())
}

func ExampleParseEnv() {
	spec, err := traitenv.ParseEnv("omp_large_cap_mem_space:alignment=64,pinned=true")
	fmt.Println(spec.Memspace, spec.Traits, err)

	spec, _ = traitenv.ParseEnv("omp_cgroup_mem_alloc")
	fmt.Println(predef.Name(spec.Allocator), spec.Memspace)

	_, err = traitenv.ParseEnv("omp_default_mem_space:access=none")
	fmt.Println(err)
	// Output:
	// omp_large_cap_mem_space [{omp_atk_alignment 64} {omp_atk_pinned 1}] <nil>
	// omp_cgroup_mem_alloc omp_default_mem_space
	// OMP_ALLOCATOR="omp_default_mem_space:access=none": access="none": unknown value "none" (want one of all, memspace, device, cgroup, pteam, thread)
}
