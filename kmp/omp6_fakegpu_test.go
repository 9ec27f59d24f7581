package kmp

import (
	"os"
	"os/exec"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

// TestOmp6OnFakeGPU runs memset, the async copy and the rectangular copies
// on device memory of the fake CUDA driver (whose async copies land late),
// in a child process that loads it.
func TestOmp6OnFakeGPU(t *testing.T) {
	lib := fakedrv.Build(t, "fakecuda")
	cmd := exec.Command(os.Args[0], "-test.run=^TestOmp6Child$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "OMPALLOC_KMP_CHILD=omp6", "OMPALLOC_CUDA_LIBRARY="+lib, "OMPALLOC_DISABLE_HSA=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestOmp6Child")
	require.NotContains(t, string(out), "warning")
}

func TestOmp6Child(t *testing.T) {
	if os.Getenv("OMPALLOC_KMP_CHILD") != "omp6" {
		t.Skip("run by TestOmp6OnFakeGPU in a child process")
	}
	require.GreaterOrEqual(t, GetNumDevices(), 1)
	host := GetInitialDevice()
	const n = 1<<20 + 100 // more than one host buffer's worth
	d := TargetAlloc(n, 0)
	require.NotNil(t, d)
	defer TargetFree(d, 0)
	h := hostBytes(t, n)
	ph := unsafe.Pointer(&h[0])
	check := func(want byte) {
		t.Helper()
		for i := range h {
			h[i] = 0
		}
		require.Equal(t, 0, TargetMemcpy(ph, d, n, 0, 0, host, 0))
		for _, i := range []int{0, 1 << 20, n - 1} {
			require.Equal(t, want, h[i], "byte %d", i)
		}
	}
	require.Equal(t, d, TargetMemset(d, 0x5A, n, 0))
	check(0x5A)
	// libgomp's omp_target_memset.c: omp_initial_device, then device 0.
	libgompTargetMemset(t)

	t1 := TargetMemsetAsync(d, 0x11, n, 0)
	t2 := TargetMemcpyAsync(ph, d, n, 0, 0, host, 0, t1)
	require.Equal(t, 0, t2.Wait())
	require.Equal(t, byte(0x11), h[n-1])

	// Host → device: rows 2..5, columns 4..11 of a 8x16 byte matrix, to
	// the same place of a zeroed device matrix; back whole, and compare.
	src := hostBytes(t, 128)
	for i := range src {
		src[i] = byte(i + 1)
	}
	require.Equal(t, d, TargetMemset(d, 0, 128, 0))
	dims := []uintptr{8, 16}
	for _, async := range []bool{false, true} {
		vol, off := []uintptr{4, 8}, []uintptr{2, 4}
		if async {
			require.Equal(t, 0, TargetMemcpyRectAsync(d, unsafe.Pointer(&src[0]), 1, 2, vol, off, off, dims, dims, 0, host).Wait())
		} else {
			require.Equal(t, 0, TargetMemcpyRect(d, unsafe.Pointer(&src[0]), 1, 2, vol, off, off, dims, dims, 0, host))
		}
		back := hostBytes(t, 128)
		require.Equal(t, 0, TargetMemcpy(unsafe.Pointer(&back[0]), d, 128, 0, 0, host, 0))
		for r := range 8 {
			for c := range 16 {
				want := byte(0)
				if r >= 2 && r < 6 && c >= 4 && c < 12 {
					want = src[r*16+c]
				}
				require.Equal(t, want, back[r*16+c], "(%d,%d)", r, c)
			}
		}
	}
}
