package kmp

import (
	"os"
	"os/exec"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

// On the initial device every address is present, mapped to itself and
// accessible; nothing can be associated there; nil and bad device numbers
// answer as LLVM's api.cpp does (false, nil, -1), with a warning instead of
// LLVM's abort for a bad device.
func TestMappingRoutinesOnTheHost(t *testing.T) {
	host := GetInitialDevice()
	x := Alloc(64, DefaultMemAlloc)
	require.NotNil(t, x)
	defer Free(x, DefaultMemAlloc)
	for _, tc := range []struct {
		name string
		got  func() any
		want any
		warn string
	}{
		{"is_present host", func() any { return TargetIsPresent(x, host) }, 1, ""},
		{"is_present nil", func() any { return TargetIsPresent(nil, host) }, 0, ""},
		{"is_present bad device", func() any { return TargetIsPresent(x, host+1) }, 0, "omp_target_is_present: device"},
		{"is_present negative device", func() any { return TargetIsPresent(x, -7) }, 0, "not a device number"},
		{"mapped host", func() any { return GetMappedPtr(x, host) }, x, ""},
		{"mapped nil", func() any { return GetMappedPtr(nil, host) }, unsafe.Pointer(nil), "omp_get_mapped_ptr: nil pointer"},
		{"mapped bad device", func() any { return GetMappedPtr(x, host+1) }, unsafe.Pointer(nil), "omp_get_mapped_ptr: device"},
		{"associate on host", func() any { return TargetAssociatePtr(x, x, 64, 0, host) }, -1, "no association possible on the host"},
		{"associate nil", func() any { return TargetAssociatePtr(nil, x, 64, 0, host) }, -1, "invalid arguments"},
		{"associate size 0", func() any { return TargetAssociatePtr(x, x, 0, 0, host) }, -1, "invalid arguments"},
		{"disassociate on host", func() any { return TargetDisassociatePtr(x, host) }, -1, "no association possible on the host"},
		{"disassociate nil", func() any { return TargetDisassociatePtr(nil, host) }, -1, "nil host pointer"},
		{"accessible host", func() any { return TargetIsAccessible(x, 64, host) }, 1, ""},
		{"accessible nil", func() any { return TargetIsAccessible(nil, 64, host) }, 0, ""},
		{"accessible size 0", func() any { return TargetIsAccessible(x, 0, host) }, 0, ""},
		{"accessible bad device", func() any { return TargetIsAccessible(x, 64, host+1) }, 0, "omp_target_is_accessible: device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got any
			w := captureWarnings(t, func() { got = tc.got() })
			require.Equal(t, tc.want, got)
			if tc.warn == "" {
				require.Empty(t, w)
			} else {
				require.Contains(t, w, tc.warn)
			}
		})
	}
}

// On a device (the fake CUDA driver, in a child process): associations
// as LLVM makes them.
func TestMappingRoutinesOnFakeGPU(t *testing.T) {
	lib := fakedrv.Build(t, "fakecuda")
	cmd := exec.Command(os.Args[0], "-test.run=^TestMappingChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "OMPALLOC_KMP_CHILD=mapping", "OMPALLOC_CUDA_LIBRARY="+lib, "OMPALLOC_DISABLE_HSA=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestMappingChild")
}

func TestMappingChild(t *testing.T) {
	if os.Getenv("OMPALLOC_KMP_CHILD") != "mapping" {
		t.Skip("run by TestMappingRoutinesOnFakeGPU in a child process")
	}
	require.GreaterOrEqual(t, GetNumDevices(), 1)
	const dev = 0
	h := Alloc(4096, DefaultMemAlloc)
	require.NotNil(t, h)
	defer Free(h, DefaultMemAlloc)
	d := TargetAlloc(8192, dev)
	require.NotNil(t, d)
	defer TargetFree(d, dev)
	at := func(p unsafe.Pointer, off uintptr) unsafe.Pointer { return unsafe.Add(p, off) }

	require.Equal(t, 0, TargetIsPresent(h, dev), "nothing mapped yet")
	require.Nil(t, GetMappedPtr(h, dev))

	require.Equal(t, 0, TargetAssociatePtr(h, d, 4096, 1024, dev))
	require.Equal(t, 1, TargetIsPresent(h, dev))
	require.Equal(t, 1, TargetIsPresent(at(h, 4095), dev), "any byte of the range")
	require.Equal(t, 0, TargetIsPresent(at(h, 4096), dev), "the byte past it")
	require.Equal(t, at(d, 1024), GetMappedPtr(h, dev), "device_offset applies")
	require.Equal(t, at(d, 1024+100), GetMappedPtr(at(h, 100), dev))

	require.Equal(t, 0, TargetAssociatePtr(h, d, 4096, 1024, dev), "the same association again is a no-op")
	w := captureWarnings(t, func() { require.Equal(t, -1, TargetAssociatePtr(h, d, 4096, 0, dev)) })
	require.Contains(t, w, "already associated", "another device address for the same host pointer")
	w = captureWarnings(t, func() { require.Equal(t, -1, TargetAssociatePtr(at(h, 100), d, 16, 0, dev)) })
	require.Contains(t, w, "overlaps")

	w = captureWarnings(t, func() { require.Equal(t, -1, TargetDisassociatePtr(at(h, 100), dev)) })
	require.Contains(t, w, "no association starts at", "only the host start names an association")
	require.Equal(t, 0, TargetDisassociatePtr(h, dev))
	require.Equal(t, 0, TargetIsPresent(h, dev))
	require.Nil(t, GetMappedPtr(h, dev))
	w = captureWarnings(t, func() { require.Equal(t, -1, TargetDisassociatePtr(h, dev)) })
	require.Contains(t, w, "no association starts at")

	// Accessible: the device's own memory, all of it and no further.
	require.Equal(t, 1, TargetIsAccessible(d, 8192, dev))
	require.Equal(t, 1, TargetIsAccessible(at(d, 100), 100, dev))
	require.Equal(t, 0, TargetIsAccessible(at(d, 100), 8192, dev), "runs past the block")
	require.Equal(t, 0, TargetIsAccessible(h, 64, dev), "pageable host memory")
	require.Equal(t, 1, TargetIsAccessible(h, 64, GetInitialDevice()))
}
