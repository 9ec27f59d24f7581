package kmp

import (
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

func TestGetMemspacePagesize(t *testing.T) {
	for _, ms := range []MemspaceHandle{DefaultMemSpace, HighBwMemSpace, LargeCapMemSpace, MemspaceHandle(100), GetDeviceMemspace(GetInitialDevice(), DefaultMemSpace)} {
		require.Equal(t, uintptr(os.Getpagesize()), GetMemspacePagesize(ms), "%#x", uintptr(ms))
	}
	var got uintptr
	w := captureWarnings(t, func() { got = GetMemspacePagesize(NullMemSpace) })
	require.Zero(t, got)
	require.Contains(t, w, "omp_get_memspace_pagesize: 0x0 is not a memory space")
	w = captureWarnings(t, func() { got = GetMemspacePagesize(77) })
	require.Zero(t, got)
	require.Contains(t, w, "0x4d is not a memory space")
}

func hostBytes(t *testing.T, n uintptr) []byte {
	t.Helper()
	p := Alloc(n, DefaultMemAlloc)
	require.NotNil(t, p)
	t.Cleanup(func() { Free(p, NullAllocator) })
	return unsafe.Slice((*byte)(p), n)
}

func TestTargetMemsetHost(t *testing.T) {
	host := GetInitialDevice()
	b := hostBytes(t, 3<<20)
	p := unsafe.Pointer(&b[0])
	require.Equal(t, p, TargetMemset(p, 0x1AB, 3<<20, host), "the low 8 bits of c")
	for _, v := range []byte{b[0], b[1<<20], b[3<<20-1]} {
		require.Equal(t, byte(0xAB), v)
	}
	require.Equal(t, p, TargetMemset(p, 7, 0, host), "n 0 does nothing")
	require.Equal(t, byte(0xAB), b[0])

	for _, c := range []struct {
		name string
		f    func() unsafe.Pointer
		says string
	}{
		{"past the block", func() unsafe.Pointer { return TargetMemset(p, 0, 3<<20+1, host) }, "run past the end of the allocator block"},
		{"nil", func() unsafe.Pointer { return TargetMemset(nil, 0, 8, host) }, "nil pointer"},
		{"bad device", func() unsafe.Pointer { return TargetMemset(p, 0, 8, 99) }, "99"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got unsafe.Pointer
			w := captureWarnings(t, func() { got = c.f() })
			require.Nil(t, got)
			require.Contains(t, w, "omp_target_memset: ")
			require.Contains(t, w, c.says)
			require.Equal(t, byte(0xAB), b[0], "nothing written")
		})
	}
}

// TestAsyncTasksFollowTheirDependences: a memset, then a copy that depends
// on it, then a second memset that depends on the copy: the copy sees the
// first value, and the source ends with the second.
func TestAsyncTasksFollowTheirDependences(t *testing.T) {
	host := GetInitialDevice()
	const n = 1 << 20
	src, dst := hostBytes(t, n), hostBytes(t, n)
	ps, pd := unsafe.Pointer(&src[0]), unsafe.Pointer(&dst[0])
	t1 := TargetMemsetAsync(ps, 5, n, host)
	t2 := TargetMemcpyAsync(pd, ps, n, 0, 0, host, host, t1)
	t3 := TargetMemsetAsync(ps, 9, n, host, t2)
	require.Equal(t, 0, t3.Wait())
	require.True(t, t1.Done() && t2.Done())
	require.NoError(t, t2.Err())
	require.Equal(t, byte(5), dst[0])
	require.Equal(t, byte(5), dst[n-1])
	require.Equal(t, byte(9), src[n-1])

	// Bad arguments: found at once, a warning, a failed task.
	var bad *Task
	w := captureWarnings(t, func() { bad = TargetMemcpyAsync(pd, ps, n+1, 0, 0, host, host) })
	require.True(t, bad.Done())
	require.Equal(t, -1, bad.Wait())
	require.ErrorIs(t, bad.Err(), errOutOfBounds)
	require.Contains(t, w, "omp_target_memcpy_async: ")
	w = captureWarnings(t, func() { bad = TargetMemsetAsync(ps, 0, 8, 99) })
	require.Equal(t, -1, bad.Wait())
	require.Contains(t, w, "omp_target_memset_async: ")
	// A failed dependence orders, it does not cancel.
	ok := TargetMemsetAsync(ps, 3, n, host, bad)
	require.Equal(t, 0, ok.Wait())
	require.Equal(t, byte(3), src[0])
	require.Equal(t, -1, (*Task)(nil).Wait())
	require.Equal(t, 0, TargetMemcpyAsync(pd, ps, 0, 0, 0, host, host).Wait())
}

// TestTargetMemcpyRect copies a 2x3x4 block of int32 out of a 4x5x6 array
// at (1,1,1) into a 3x4x5 array at (0,1,0), synchronously and as a task,
// and checks every element, inside and outside the block.
func TestTargetMemcpyRect(t *testing.T) {
	host := GetInitialDevice()
	sd := []uintptr{4, 5, 6}
	dd := []uintptr{3, 4, 5}
	vol := []uintptr{2, 3, 4}
	so := []uintptr{1, 1, 1}
	do := []uintptr{0, 1, 0}
	srcB := hostBytes(t, 4*5*6*4)
	src := unsafe.Slice((*int32)(unsafe.Pointer(&srcB[0])), 4*5*6)
	for i := range src {
		src[i] = int32(i)
	}
	for _, async := range []bool{false, true} {
		dstB := hostBytes(t, 3*4*5*4)
		dst := unsafe.Slice((*int32)(unsafe.Pointer(&dstB[0])), 3*4*5)
		for i := range dst {
			dst[i] = -1
		}
		ps, pd := unsafe.Pointer(&src[0]), unsafe.Pointer(&dst[0])
		if async {
			require.Equal(t, 0, TargetMemcpyRectAsync(pd, ps, 4, 3, vol, do, so, dd, sd, host, host).Wait())
		} else {
			require.Equal(t, 0, TargetMemcpyRect(pd, ps, 4, 3, vol, do, so, dd, sd, host, host))
		}
		for i := range dd[0] {
			for j := range dd[1] {
				for k := range dd[2] {
					got := dst[(i*dd[1]+j)*dd[2]+k]
					in := i >= do[0] && i < do[0]+vol[0] && j >= do[1] && j < do[1]+vol[1] && k >= do[2] && k < do[2]+vol[2]
					if !in {
						require.Equal(t, int32(-1), got, "(%d,%d,%d) outside the block", i, j, k)
						continue
					}
					si, sj, sk := i-do[0]+so[0], j-do[1]+so[1], k-do[2]+so[2]
					require.Equal(t, src[(si*sd[1]+sj)*sd[2]+sk], got, "(%d,%d,%d) async=%v", i, j, k, async)
				}
			}
		}
	}
	require.Equal(t, MaxRectDims, TargetMemcpyRect(nil, nil, 0, 0, nil, nil, nil, nil, nil, host, host))
	require.Equal(t, 0, TargetMemcpyRectAsync(nil, nil, 0, 0, nil, nil, nil, nil, nil, host, host).Wait())
	dstB := hostBytes(t, 3*4*5*4)
	ps, pd := unsafe.Pointer(&src[0]), unsafe.Pointer(&dstB[0])
	for _, c := range []struct {
		name string
		f    func() int
		says string
	}{
		{"no dimensions", func() int { return TargetMemcpyRect(pd, ps, 4, 0, vol, do, so, dd, sd, host, host) }, "0 dimensions"},
		{"short volume", func() int { return TargetMemcpyRect(pd, ps, 4, 3, vol[:2], do, so, dd, sd, host, host) }, "volume has 2 entries for 3 dimensions"},
		{"volume past the source", func() int {
			return TargetMemcpyRect(pd, ps, 4, 3, []uintptr{2, 3, 6}, do, so, dd, sd, host, host)
		}, "dimension 2: offset 0 + volume 6 exceed the destination's 5"},
		{"offset past the source", func() int {
			return TargetMemcpyRect(pd, ps, 4, 3, vol, do, []uintptr{3, 1, 1}, dd, sd, host, host)
		}, "dimension 0: offset 3 + volume 2 exceed the source's 4"},
		{"array past the block", func() int {
			return TargetMemcpyRect(pd, ps, 8, 3, vol, do, so, dd, sd, host, host)
		}, "run past the end of the allocator block"},
		{"element size 0", func() int { return TargetMemcpyRect(pd, ps, 0, 3, vol, do, so, dd, sd, host, host) }, "element size 0"},
		{"nil source", func() int { return TargetMemcpyRect(pd, nil, 4, 3, vol, do, so, dd, sd, host, host) }, "nil pointer"},
		{"bad device", func() int { return TargetMemcpyRect(pd, ps, 4, 3, vol, do, so, dd, sd, 42, host) }, "42"},
		{"async", func() int { return TargetMemcpyRectAsync(pd, ps, 4, 3, vol[:1], do, so, dd, sd, host, host).Wait() }, "omp_target_memcpy_rect_async: volume has 1 entries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rc int
			w := captureWarnings(t, func() { rc = c.f() })
			require.Equal(t, -1, rc)
			require.Contains(t, w, c.says)
		})
	}
}
