package traits_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/traits"
)

func TestKeyNumbersAndNames(t *testing.T) {
	// Numbers from LLVM's omp.h (omp_alloctrait_key_t).
	cases := []struct {
		key  traits.Key
		num  uintptr
		name string
	}{
		{traits.SyncHint, 1, "sync_hint"},
		{traits.Alignment, 2, "alignment"},
		{traits.Access, 3, "access"},
		{traits.PoolSize, 4, "pool_size"},
		{traits.Fallback, 5, "fallback"},
		{traits.FbData, 6, "fb_data"},
		{traits.Pinned, 7, "pinned"},
		{traits.Partition, 8, "partition"},
		{traits.PinDevice, 9, "pin_device"},
		{traits.PreferredDevice, 10, "preferred_device"},
		{traits.DeviceAccess, 11, "device_access"},
		{traits.TargetAccess, 12, "target_access"},
		{traits.AtomicScope, 13, "atomic_scope"},
		{traits.PartSize, 14, "part_size"},
		{traits.Partitioner, 15, "partitioner"},
		{traits.PartitionerArg, 16, "partitioner_arg"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.num, uintptr(c.key))
			require.Equal(t, c.name, c.key.Name())
			require.Equal(t, "omp_atk_"+c.name, c.key.String())
			for _, n := range []string{c.name, "omp_atk_" + c.name, "OMP_ATK_" + c.name} {
				k, ok := traits.KeyByName(n)
				require.True(t, ok, n)
				require.Equal(t, c.key, k)
			}
		})
	}
	for _, k := range []traits.Key{0, 17, 1000} {
		require.Empty(t, k.Name())
		require.Equal(t, fmt.Sprintf("Key(%d)", uintptr(k)), k.String())
	}
	k, ok := traits.KeyByName("omp_atk_partioner") // as the OpenMP 6.0 header spells it
	require.True(t, ok)
	require.Equal(t, traits.Partitioner, k)
	for _, n := range []string{"", "align", "omp_atk_", "omp_atv_true", "partitioners", "sync-hint"} {
		_, ok := traits.KeyByName(n)
		require.False(t, ok, n)
	}
}

func TestValueNumbers(t *testing.T) {
	// LLVM omp.h, OpenMP 6.0 numbering.
	want := map[uintptr]uintptr{
		traits.False: 0, traits.True: 1, traits.Contended: 3, traits.Uncontended: 4,
		traits.Serialized: 5, traits.Private: 6, traits.Device: 7, traits.Thread: 8,
		traits.Pteam: 9, traits.Cgroup: 10, traits.DefaultMemFb: 11, traits.NullFb: 12,
		traits.AbortFb: 13, traits.AllocatorFb: 14, traits.Environment: 15,
		traits.Nearest: 16, traits.Blocked: 17, traits.Interleaved: 18, traits.All: 19,
		traits.Single: 20, traits.Multiple: 21, traits.Memspace: 22,
	}
	for got, w := range want {
		require.Equal(t, w, got)
	}
	require.Equal(t, ^uintptr(0), uintptr(traits.Default)) // (omp_uintptr_t)-1
}

func TestFallbackModeString(t *testing.T) {
	require.Equal(t, "default_mem_fb", traits.FallbackMode(traits.DefaultMemFb).String())
	require.Equal(t, "null_fb", traits.FallbackMode(traits.NullFb).String())
	require.Equal(t, "abort_fb", traits.FallbackMode(traits.AbortFb).String())
	require.Equal(t, "allocator_fb", traits.FallbackMode(traits.AllocatorFb).String())
	require.Equal(t, "FallbackMode(3)", traits.FallbackMode(3).String())
}

// No traits: LLVM's defaults.
func TestDefaults(t *testing.T) {
	d, err := traits.FromList(nil)
	require.NoError(t, err)
	require.Equal(t, traits.Set{
		SyncHint:        traits.Contended,
		Alignment:       1,
		Access:          traits.All,
		PoolSize:        0,
		Fallback:        traits.DefaultMemFb,
		FbData:          0,
		Pinned:          false,
		Partition:       traits.Environment,
		PinDevice:       -1,
		PreferredDevice: -1,
		DeviceAccess:    traits.Memspace,
		TargetAccess:    traits.Single,
		AtomicScope:     traits.Device,
		PartSize:        0,
	}, d)
	s, err := traits.FromList(nil)
	require.NoError(t, err)
	require.Equal(t, d, s)
	require.Empty(t, d.Traits())
	require.Equal(t, "defaults", d.String())
}

// topBit is the largest power of two a uintptr holds.
const topBit = ^uintptr(0)>>1 + 1

// TestFromListPerKey tries good and bad values for every key.
func TestFromListPerKey(t *testing.T) {
	type tc struct {
		name  string
		trait traits.Trait
		want  func(*traits.Set) // edits the defaults (FromList(nil)) into the expected Set; nil = error expected
	}
	tr := func(k traits.Key, v uintptr) traits.Trait { return traits.Trait{Key: k, Value: v} }
	cases := []tc{
		// sync_hint
		{"sync_hint contended", tr(traits.SyncHint, traits.Contended), func(s *traits.Set) {}},
		{"sync_hint uncontended", tr(traits.SyncHint, traits.Uncontended), func(s *traits.Set) { s.SyncHint = traits.Uncontended }},
		{"sync_hint serialized", tr(traits.SyncHint, traits.Serialized), func(s *traits.Set) { s.SyncHint = traits.Serialized }},
		{"sync_hint private", tr(traits.SyncHint, traits.Private), func(s *traits.Set) { s.SyncHint = traits.Private }},
		{"sync_hint all", tr(traits.SyncHint, traits.All), nil},
		{"sync_hint 0", tr(traits.SyncHint, 0), nil},
		{"sync_hint 2", tr(traits.SyncHint, 2), nil},
		// alignment
		{"alignment 1", tr(traits.Alignment, 1), func(s *traits.Set) {}},
		{"alignment 64", tr(traits.Alignment, 64), func(s *traits.Set) { s.Alignment = 64 }},
		{"alignment 1MiB", tr(traits.Alignment, 1<<20), func(s *traits.Set) { s.Alignment = 1 << 20 }},
		{"alignment top bit", tr(traits.Alignment, topBit), func(s *traits.Set) { s.Alignment = topBit }},
		{"alignment 0", tr(traits.Alignment, 0), nil},
		{"alignment 3", tr(traits.Alignment, 3), nil},
		{"alignment 48", tr(traits.Alignment, 48), nil},
		// access
		{"access all", tr(traits.Access, traits.All), func(s *traits.Set) {}},
		{"access memspace", tr(traits.Access, traits.Memspace), func(s *traits.Set) { s.Access = traits.Memspace }},
		{"access device", tr(traits.Access, traits.Device), func(s *traits.Set) { s.Access = traits.Device }},
		{"access cgroup", tr(traits.Access, traits.Cgroup), func(s *traits.Set) { s.Access = traits.Cgroup }},
		{"access pteam", tr(traits.Access, traits.Pteam), func(s *traits.Set) { s.Access = traits.Pteam }},
		{"access thread", tr(traits.Access, traits.Thread), func(s *traits.Set) { s.Access = traits.Thread }},
		{"access contended", tr(traits.Access, traits.Contended), nil},
		{"access single", tr(traits.Access, traits.Single), nil},
		// pool_size
		{"pool_size 1", tr(traits.PoolSize, 1), func(s *traits.Set) { s.PoolSize = 1 }},
		{"pool_size 2MiB", tr(traits.PoolSize, 2<<20), func(s *traits.Set) { s.PoolSize = 2 << 20 }},
		{"pool_size 0", tr(traits.PoolSize, 0), nil},
		// fallback
		{"fallback default_mem_fb", tr(traits.Fallback, traits.DefaultMemFb), func(s *traits.Set) {}},
		{"fallback null_fb", tr(traits.Fallback, traits.NullFb), func(s *traits.Set) { s.Fallback = traits.NullFb }},
		{"fallback abort_fb", tr(traits.Fallback, traits.AbortFb), func(s *traits.Set) { s.Fallback = traits.AbortFb }},
		{"fallback allocator_fb alone", tr(traits.Fallback, traits.AllocatorFb), nil},
		{"fallback true", tr(traits.Fallback, traits.True), nil},
		{"fallback 15", tr(traits.Fallback, 15), nil},
		// fb_data alone: accepted and ignored (fallback is default_mem_fb)
		{"fb_data alone", tr(traits.FbData, 5), func(s *traits.Set) {}},
		{"fb_data 0", tr(traits.FbData, 0), func(s *traits.Set) {}},
		// pinned
		{"pinned true", tr(traits.Pinned, traits.True), func(s *traits.Set) { s.Pinned = true }},
		{"pinned false", tr(traits.Pinned, traits.False), func(s *traits.Set) {}},
		{"pinned 2", tr(traits.Pinned, 2), nil},
		{"pinned all", tr(traits.Pinned, traits.All), nil},
		// partition
		{"partition environment", tr(traits.Partition, traits.Environment), func(s *traits.Set) {}},
		{"partition nearest", tr(traits.Partition, traits.Nearest), func(s *traits.Set) { s.Partition = traits.Nearest }},
		{"partition blocked", tr(traits.Partition, traits.Blocked), func(s *traits.Set) { s.Partition = traits.Blocked }},
		{"partition interleaved", tr(traits.Partition, traits.Interleaved), func(s *traits.Set) { s.Partition = traits.Interleaved }},
		{"partition partitioner(23)", tr(traits.Partition, 23), nil},
		{"partition all", tr(traits.Partition, traits.All), nil},
		// pin_device / preferred_device
		{"pin_device 0", tr(traits.PinDevice, 0), func(s *traits.Set) { s.PinDevice = 0 }},
		{"pin_device 3", tr(traits.PinDevice, 3), func(s *traits.Set) { s.PinDevice = 3 }},
		{"pin_device max int32", tr(traits.PinDevice, math.MaxInt32), func(s *traits.Set) { s.PinDevice = math.MaxInt32 }},
		{"pin_device too big", tr(traits.PinDevice, math.MaxInt32+1), nil},
		{"pin_device -2 (omp_invalid_device)", tr(traits.PinDevice, ^uintptr(1)), nil},
		{"preferred_device 1", tr(traits.PreferredDevice, 1), func(s *traits.Set) { s.PreferredDevice = 1 }},
		{"preferred_device negative", tr(traits.PreferredDevice, ^uintptr(4)), nil},
		// device_access
		{"device_access all", tr(traits.DeviceAccess, traits.All), func(s *traits.Set) { s.DeviceAccess = traits.All }},
		{"device_access memspace", tr(traits.DeviceAccess, traits.Memspace), func(s *traits.Set) {}},
		{"device_access device", tr(traits.DeviceAccess, traits.Device), func(s *traits.Set) { s.DeviceAccess = traits.Device }},
		{"device_access thread", tr(traits.DeviceAccess, traits.Thread), nil},
		// target_access
		{"target_access single", tr(traits.TargetAccess, traits.Single), func(s *traits.Set) {}},
		{"target_access multiple", tr(traits.TargetAccess, traits.Multiple), func(s *traits.Set) { s.TargetAccess = traits.Multiple }},
		{"target_access all", tr(traits.TargetAccess, traits.All), nil},
		// atomic_scope
		{"atomic_scope all", tr(traits.AtomicScope, traits.All), func(s *traits.Set) { s.AtomicScope = traits.All }},
		{"atomic_scope device", tr(traits.AtomicScope, traits.Device), func(s *traits.Set) {}},
		{"atomic_scope thread", tr(traits.AtomicScope, traits.Thread), nil},
		// part_size
		{"part_size 4096", tr(traits.PartSize, 4096), func(s *traits.Set) { s.PartSize = 4096 }},
		{"part_size 0", tr(traits.PartSize, 0), nil},
		// unknown keys
		{"key 0", tr(0, 1), nil},
		{"partitioner alone is ignored", tr(traits.Partitioner, 1), func(s *traits.Set) {}},
		{"partitioner 0", tr(traits.Partitioner, 0), nil},
		{"key 17", tr(17, 1), nil},
		{"key 99", tr(99, traits.Default), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := traits.FromList([]traits.Trait{c.trait})
			if c.want == nil {
				require.Error(t, err)
				require.ErrorIs(t, err, traits.ErrInvalidTrait)
				var te *traits.TraitError
				require.ErrorAs(t, err, &te)
				require.Equal(t, c.trait.Key, te.Key)
				require.Contains(t, err.Error(), c.trait.Key.String(), "the error names the key")
				require.Equal(t, traits.Set{}, s)
				return
			}
			require.NoError(t, err)
			want, err := traits.FromList(nil)
			require.NoError(t, err)
			c.want(&want)
			require.Equal(t, want, s)
		})
	}
}

func TestDefaultValueResetsEveryKey(t *testing.T) {
	for k := traits.SyncHint; k <= traits.PartitionerArg; k++ {
		s, err := traits.FromList([]traits.Trait{{Key: k, Value: traits.Default}})
		require.NoError(t, err, "%v", k)
		d, err := traits.FromList(nil)
		require.NoError(t, err)
		require.Equal(t, d, s, "%v", k)
	}
	// Default after a real value puts the default back.
	s, err := traits.FromList([]traits.Trait{
		{Key: traits.Alignment, Value: 64}, {Key: traits.Pinned, Value: traits.True},
		{Key: traits.Alignment, Value: traits.Default},
	})
	require.NoError(t, err)
	require.Equal(t, uintptr(1), s.Alignment)
	require.True(t, s.Pinned)
}

func TestFromListCombinations(t *testing.T) {
	cases := []struct {
		name    string
		ts      []traits.Trait
		wantErr string // substring; "" = accepted
		check   func(t *testing.T, s traits.Set)
	}{
		{
			name: "allocator_fb with fb_data",
			ts:   []traits.Trait{{Key: traits.Fallback, Value: traits.AllocatorFb}, {Key: traits.FbData, Value: 5}},
			check: func(t *testing.T, s traits.Set) {
				require.Equal(t, traits.FallbackMode(traits.AllocatorFb), s.Fallback)
				require.Equal(t, uintptr(5), s.FbData)
			},
		},
		{
			name: "fb_data before allocator_fb",
			ts:   []traits.Trait{{Key: traits.FbData, Value: 0x7f00_1000}, {Key: traits.Fallback, Value: traits.AllocatorFb}},
			check: func(t *testing.T, s traits.Set) {
				require.Equal(t, uintptr(0x7f00_1000), s.FbData)
			},
		},
		{
			name:    "allocator_fb with fb_data 0",
			ts:      []traits.Trait{{Key: traits.Fallback, Value: traits.AllocatorFb}, {Key: traits.FbData, Value: 0}},
			wantErr: "allocator_fb needs an omp_atk_fb_data",
		},
		{
			name:    "allocator_fb with fb_data reset to default",
			ts:      []traits.Trait{{Key: traits.Fallback, Value: traits.AllocatorFb}, {Key: traits.FbData, Value: 4}, {Key: traits.FbData, Value: traits.Default}},
			wantErr: "allocator_fb needs",
		},
		{
			name: "fb_data with null_fb is ignored",
			ts:   []traits.Trait{{Key: traits.Fallback, Value: traits.NullFb}, {Key: traits.FbData, Value: 4}},
			check: func(t *testing.T, s traits.Set) {
				require.Equal(t, traits.FallbackMode(traits.NullFb), s.Fallback)
				require.Zero(t, s.FbData)
			},
		},
		{
			name: "duplicate key: last wins",
			ts:   []traits.Trait{{Key: traits.Alignment, Value: 64}, {Key: traits.Alignment, Value: 256}},
			check: func(t *testing.T, s traits.Set) {
				require.Equal(t, uintptr(256), s.Alignment)
			},
		},
		{
			name: "duplicate fallback: allocator_fb overridden, no fb_data needed",
			ts:   []traits.Trait{{Key: traits.Fallback, Value: traits.AllocatorFb}, {Key: traits.Fallback, Value: traits.NullFb}},
			check: func(t *testing.T, s traits.Set) {
				require.Equal(t, traits.FallbackMode(traits.NullFb), s.Fallback)
			},
		},
		{
			name: "pinned false after true",
			ts:   []traits.Trait{{Key: traits.Pinned, Value: traits.True}, {Key: traits.Pinned, Value: traits.False}},
			check: func(t *testing.T, s traits.Set) {
				require.False(t, s.Pinned)
			},
		},
		{
			name:    "a bad value anywhere rejects the list",
			ts:      []traits.Trait{{Key: traits.Alignment, Value: 64}, {Key: traits.Pinned, Value: 7}, {Key: traits.PoolSize, Value: 10}},
			wantErr: "omp_atk_pinned=7 (omp_atv_device): want one of true, false",
		},
		{
			name:    "error names the value",
			ts:      []traits.Trait{{Key: traits.Alignment, Value: 3}},
			wantErr: "invalid allocator trait omp_atk_alignment=3: alignment must be a power of two",
		},
		{
			name:    "error names an enum value by name",
			ts:      []traits.Trait{{Key: traits.SyncHint, Value: traits.Blocked}},
			wantErr: "omp_atk_sync_hint=17 (omp_atv_blocked): want one of contended, uncontended, serialized, private",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := traits.FromList(c.ts)
			if c.wantErr != "" {
				require.ErrorIs(t, err, traits.ErrInvalidTrait)
				require.ErrorContains(t, err, c.wantErr)
				return
			}
			require.NoError(t, err)
			c.check(t, s)
		})
	}
}

func TestTraitsRoundTrip(t *testing.T) {
	lists := [][]traits.Trait{
		nil,
		{{Key: traits.Alignment, Value: 64}},
		{{Key: traits.Pinned, Value: traits.True}, {Key: traits.PoolSize, Value: 1 << 20}, {Key: traits.Fallback, Value: traits.NullFb}},
		{{Key: traits.Fallback, Value: traits.AllocatorFb}, {Key: traits.FbData, Value: 2}, {Key: traits.SyncHint, Value: traits.Private}},
		{
			{Key: traits.Access, Value: traits.Thread}, {Key: traits.Partition, Value: traits.Blocked},
			{Key: traits.PinDevice, Value: 0}, {Key: traits.PreferredDevice, Value: 2},
			{Key: traits.DeviceAccess, Value: traits.All}, {Key: traits.TargetAccess, Value: traits.Multiple},
			{Key: traits.AtomicScope, Value: traits.All}, {Key: traits.PartSize, Value: 4096},
		},
	}
	for i, ts := range lists {
		s, err := traits.FromList(ts)
		require.NoError(t, err, i)
		back, err := traits.FromList(s.Traits())
		require.NoError(t, err, i)
		require.Equal(t, s, back, i)
	}
}

func TestSetString(t *testing.T) {
	s, err := traits.FromList([]traits.Trait{
		{Key: traits.Pinned, Value: traits.True}, {Key: traits.Alignment, Value: 64},
		{Key: traits.Fallback, Value: traits.AllocatorFb}, {Key: traits.FbData, Value: 5},
		{Key: traits.PinDevice, Value: 1},
	})
	require.NoError(t, err)
	require.Equal(t, "alignment=64,fallback=allocator_fb,fb_data=omp_low_lat_mem_alloc,pinned=true,pin_device=1", s.String())
}

func TestErrorsAreDistinct(t *testing.T) {
	_, err := traits.FromList([]traits.Trait{{Key: 42, Value: 1}})
	require.ErrorIs(t, err, traits.ErrInvalidTrait)
	require.ErrorContains(t, err, "Key(42)")
	require.ErrorContains(t, err, "unknown trait key")
}

func ExampleFromList() {
	s, err := traits.FromList([]traits.Trait{
		{Key: traits.Alignment, Value: 64},
		{Key: traits.Fallback, Value: traits.NullFb},
	})
	fmt.Println(s, err)

	_, err = traits.FromList([]traits.Trait{{Key: traits.Alignment, Value: 48}})
	fmt.Println(err)
	fmt.Println(errors.Is(err, traits.ErrInvalidTrait))
	// Output:
	// alignment=64,fallback=null_fb <nil>
	// invalid allocator trait omp_atk_alignment=48: alignment must be a power of two
	// true
}

func TestPartitionerTraits(t *testing.T) {
	s, err := traits.FromList([]traits.Trait{{Key: traits.Partition, Value: traits.PartitionerValue},
		{Key: traits.Partitioner, Value: 5}, {Key: traits.PartitionerArg, Value: 0}})
	require.NoError(t, err)
	require.Equal(t, traits.PartitionerValue, s.Partition)
	require.Equal(t, uintptr(5), s.Partitioner)
	require.Zero(t, s.PartitionerArg)
	require.Equal(t, "partition=partitioner,partitioner=5", s.String())
	back, err := traits.FromList(s.Traits())
	require.NoError(t, err)
	require.Equal(t, s, back)

	_, err = traits.FromList([]traits.Trait{{Key: traits.Partition, Value: traits.PartitionerValue}})
	require.ErrorContains(t, err, "needs an omp_atk_partitioner trait")
	require.EqualValues(t, 23, traits.PartitionerValue)
}
