package kmp

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/numa"
)

func TestDeviceMemspaces(t *testing.T) {
	host := GetInitialDevice()
	all := GetDevicesAllMemspace(DefaultMemSpace)
	require.NotEqual(t, NullMemSpace, all)
	require.Equal(t, all, GetDevicesAllMemspace(DefaultMemSpace), "identical requests, identical handle")
	require.Equal(t, GetNumDevices()+1, GetMemspaceNumResources(all))

	hostOnly := GetDeviceMemspace(host, DefaultMemSpace)
	require.Equal(t, hostOnly, GetDevicesMemspace([]int{host, host}, DefaultMemSpace))
	require.Equal(t, 1, GetMemspaceNumResources(hostOnly))
	require.Equal(t, len(numa.System().Tiers().Default), GetMemspaceNumResources(DefaultMemSpace), "one resource per NUMA node")

	withHost := GetDeviceAndHostMemspace(host, TargetHostMemSpace)
	require.NotEqual(t, withHost, GetDeviceMemspace(host, TargetHostMemSpace))
	require.Equal(t, withHost, GetDevicesAndHostMemspace([]int{host}, TargetHostMemSpace))

	sub := GetSubmemspace(all, []int{GetMemspaceNumResources(all) - 1})
	require.NotEqual(t, NullMemSpace, sub)
	require.Equal(t, 1, GetMemspaceNumResources(sub))
	// Resource 0 is the whole default space only where it has one node.
	first := GetSubmemspace(DefaultMemSpace, []int{0})
	require.NotEqual(t, NullMemSpace, first)
	require.Equal(t, 1, GetMemspaceNumResources(first))
	if n := GetMemspaceNumResources(DefaultMemSpace); n == 1 {
		require.Equal(t, DefaultMemSpace, first)
	} else {
		require.NotEqual(t, DefaultMemSpace, first, "resource 0 of %d nodes", n)
	}

	// Allocators: one per memory space, and they allocate.
	a := GetDevicesAllAllocator(DefaultMemSpace)
	require.NotEqual(t, NullAllocator, a)
	require.Equal(t, a, GetDevicesAllAllocator(DefaultMemSpace))
	p := Alloc(4096, a)
	require.NotNil(t, p)
	bytesAt(p, 4096)[4095] = 1
	Free(p, a)
	for _, h := range []AllocatorHandle{
		GetDeviceAllocator(host, DefaultMemSpace),
		GetDevicesAllocator([]int{host}, LargeCapMemSpace),
		GetDeviceAndHostAllocator(host, TargetHostMemSpace),
		GetDevicesAndHostAllocator([]int{host}, TargetSharedMemSpace),
	} {
		require.NotEqual(t, NullAllocator, h)
		p := Alloc(100, h)
		require.NotNil(t, p, "allocator %d", h)
		Free(p, h)
	}
}

func TestDeviceMemspacesRejectBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func() MemspaceHandle
		says string
	}{
		{"bad device", func() MemspaceHandle { return GetDeviceMemspace(-5, DefaultMemSpace) }, "omp_get_device_memspace"},
		{"unknown device", func() MemspaceHandle { return GetDevicesMemspace([]int{1 << 20}, DefaultMemSpace) }, "1048576"},
		{"no devices", func() MemspaceHandle { return GetDevicesMemspace(nil, DefaultMemSpace) }, "at least one device"},
		{"bad memspace", func() MemspaceHandle { return GetDeviceMemspace(0, MemspaceHandle(12)) }, "not a predefined memory space"},
		{"bad resource", func() MemspaceHandle { return GetSubmemspace(GetDevicesAllMemspace(DefaultMemSpace), []int{99}) }, "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got MemspaceHandle
			w := captureWarnings(t, func() { got = tc.f() })
			require.Equal(t, NullMemSpace, got)
			require.Contains(t, w, tc.says)
		})
	}
	w := captureWarnings(t, func() { require.Equal(t, NullAllocator, GetDeviceAllocator(-3, DefaultMemSpace)) })
	require.Contains(t, w, "omp_get_device_memspace")
}
