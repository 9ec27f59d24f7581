//go:build linux && (amd64 || arm64)

package alloc

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/partition"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

type ptnLog struct {
	computed []uintptr // sizes
	released []uintptr // user data
}

// halves cuts every allocation in two parts on the last resource and the
// first, user data = size.
func (l *ptnLog) halves(mp *partition.MemPartition) {
	l.computed = append(l.computed, mp.Size())
	if err := mp.Init(2, mp.Size()); err != nil {
		panic(err)
	}
	h := mp.Size() / 2
	_ = mp.SetPart(0, mp.NumResources()-1, h)
	_ = mp.SetPart(1, 0, mp.Size()-h)
}

func (l *ptnLog) release(mp *partition.MemPartition) { l.released = append(l.released, mp.UserData()) }

func ptnAllocator(t *testing.T, p *partition.Partitioner, fb traits.Value) *Allocator {
	t.Helper()
	a, err := NewFromTraits(memspace.Default, []traits.Trait{
		{Key: traits.Partition, Value: traits.PartitionerValue}, {Key: traits.Partitioner, Value: p.Handle()},
		{Key: traits.PartitionerArg, Value: 42}, {Key: traits.Fallback, Value: fb}})
	require.NoError(t, err)
	return a
}

// TestPartitionerDynamic: every allocation is computed, its pages are bound
// (the kernel says bind, where before they read default), and the partition
// is released when the block is freed.
func TestPartitionerDynamic(t *testing.T) {
	needMempolicy(t)
	var l ptnLog
	p, err := partition.New(partition.Dynamic, l.halves, l.release)
	require.NoError(t, err)
	a := ptnAllocator(t, p, traits.NullFb)
	nodes := numa.System().Tiers().Default
	for _, size := range []uintptr{100, 3*4096 + 100, 5 << 20} {
		b, err := a.Alloc(size)
		require.NoError(t, err)
		require.Zero(t, uintptr(b)%pageSize, "page-aligned")
		mode, got, err := numa.GetPolicy(uintptr(b))
		require.NoError(t, err)
		require.Equal(t, numa.ModeBind, mode, "%d bytes", size)
		require.Equal(t, []int{nodes[len(nodes)-1]}, got, "the first half on the last resource")
		// The last byte's page goes to the part holding that page's first
		// byte (parts are page-granular): the second half's node unless
		// the block is too small for the halves to reach separate pages.
		want := nodes[0]
		if last := (size - 1) &^ (pageSize - 1); last < size/2 {
			want = nodes[len(nodes)-1]
		}
		mode, got, err = numa.GetPolicy(uintptr(b) + size - 1)
		require.NoError(t, err)
		require.Equal(t, numa.ModeBind, mode)
		require.Equal(t, []int{want}, got, "%d bytes: the last page", size)
		unsafe.Slice((*byte)(b), size)[size-1] = 7
		require.NoError(t, Free(b))
		require.Equal(t, size, l.released[len(l.released)-1], "released at free")
	}
	require.Equal(t, []uintptr{100, 3*4096 + 100, 5 << 20}, l.computed)
	require.ErrorContains(t, p.Destroy(), "used by 1 live allocators")
	require.NoError(t, a.Destroy())
	require.NoError(t, p.Destroy())
	require.Error(t, p.Destroy())
	_, ok := partition.Lookup(p.Handle())
	require.False(t, ok)
}

func TestPartitionerLifetimes(t *testing.T) {
	t.Run("static", func(t *testing.T) {
		var l ptnLog
		p, err := partition.New(partition.Static, l.halves, l.release)
		require.NoError(t, err)
		a1, a2 := ptnAllocator(t, p, traits.NullFb), ptnAllocator(t, p, traits.NullFb)
		for _, a := range []*Allocator{a1, a2, a1} {
			b, err := a.Alloc(8192)
			require.NoError(t, err)
			require.NoError(t, Free(b))
		}
		require.Equal(t, []uintptr{8192}, l.computed, "once per size for every allocator")
		require.NoError(t, a1.Destroy())
		require.NoError(t, a2.Destroy())
		require.Empty(t, l.released)
		require.NoError(t, p.Destroy())
		require.Equal(t, []uintptr{8192}, l.released, "released with the partitioner")
	})
	t.Run("allocator", func(t *testing.T) {
		var l ptnLog
		p, err := partition.New(partition.PerAllocator, l.halves, l.release)
		require.NoError(t, err)
		a1, a2 := ptnAllocator(t, p, traits.NullFb), ptnAllocator(t, p, traits.NullFb)
		for _, a := range []*Allocator{a1, a2, a1, a2} {
			b, err := a.Alloc(8192)
			require.NoError(t, err)
			require.NoError(t, Free(b))
		}
		require.Equal(t, []uintptr{8192, 8192}, l.computed, "once per size per allocator")
		require.NoError(t, a1.Destroy())
		require.Equal(t, []uintptr{8192}, l.released, "released with its allocator")
		require.NoError(t, a2.Destroy())
		require.NoError(t, p.Destroy())
		require.Len(t, l.released, 2)
	})
}

// TestPartitionerBadPartitionGoesThroughTheFallback: a compute routine whose
// parts do not add up fails the allocation with ErrPlacement, and the
// fallback decides.
func TestPartitionerBadPartitionGoesThroughTheFallback(t *testing.T) {
	needMempolicy(t)
	var setErr error
	p, err := partition.New(partition.Dynamic, func(mp *partition.MemPartition) {
		_ = mp.Init(1, 0)
		setErr = mp.SetPart(0, mp.NumResources(), mp.Size()) // no such resource
		_ = mp.SetPart(0, 0, mp.Size()-1)
	}, nil)
	require.NoError(t, err)
	a := ptnAllocator(t, p, traits.NullFb)
	b, err := a.Alloc(4096)
	require.Nil(t, b)
	require.ErrorIs(t, err, ErrPlacement)
	require.ErrorContains(t, err, "the parts add up to 4095 bytes, the allocation has 4096")
	// Resources are the default space's nodes: [0, n).
	require.ErrorContains(t, setErr, fmt.Sprintf("resource %d out of range [0, %d)", len(numa.System().Tiers().Default), len(numa.System().Tiers().Default)))
	fb := ptnAllocator(t, p, traits.DefaultMemFb)
	b, err = fb.Alloc(4096)
	require.NoError(t, err)
	require.NoError(t, Free(b))
	require.NoError(t, a.Destroy())
	require.NoError(t, fb.Destroy())
	require.NoError(t, p.Destroy())
}

func TestPartitionerBadInput(t *testing.T) {
	_, err := partition.New(0, func(*partition.MemPartition) {}, nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = partition.New(partition.Dynamic, nil, nil)
	require.ErrorContains(t, err, "compute routine")
	_, err = NewFromTraits(memspace.Default, []traits.Trait{
		{Key: traits.Partition, Value: traits.PartitionerValue}, {Key: traits.Partitioner, Value: 1 << 40}})
	require.ErrorIs(t, err, ErrInvalidTrait)
	require.ErrorContains(t, err, "not a live partitioner")
	p, err := partition.New(partition.Dynamic, func(*partition.MemPartition) {}, nil)
	require.NoError(t, err)
	_, err = NewFromTraits(memspace.Default, []traits.Trait{{Key: traits.Pinned, Value: traits.True},
		{Key: traits.Partition, Value: traits.PartitionerValue}, {Key: traits.Partitioner, Value: p.Handle()}})
	require.ErrorIs(t, err, ErrNotSupported)
	require.NoError(t, p.Destroy(), "a refused allocator does not hold the partitioner")
	var mp partition.MemPartition
	require.ErrorContains(t, mp.SetPart(0, 0, 1), "before omp_init_mempartition")
	require.Error(t, mp.Init(0, 0))
}
