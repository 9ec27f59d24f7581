package kmp

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/procstatus"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/warn"
)

// targetWarnings runs f and returns the warning lines it wrote.
func targetWarnings(t *testing.T, f func()) []string {
	t.Helper()
	var buf bytes.Buffer
	defer warn.SetOutput(&buf)()
	f()
	if buf.Len() == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
}

// vmLckKB returns the process's locked memory in kB; it skips off Linux.
func vmLckKB(t *testing.T) int {
	t.Helper()
	n, ok := procstatus.VmLckKiB()
	if !ok {
		t.Skip("VmLck is read from /proc/self/status (Linux only)")
	}
	return n
}

// pages maps n fresh pages of host memory for the test.
func pages(t *testing.T, n int) unsafe.Pointer {
	t.Helper()
	c, err := dl.C()
	require.NoError(t, err)
	size := uintptr(n * os.Getpagesize())
	p, err := c.Map(size)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Unmap(p, size)) })
	return cmem.Ptr(p)
}

func add(p unsafe.Pointer, off uintptr) unsafe.Pointer { return unsafe.Add(p, off) }

func TestTargetDeviceQueries(t *testing.T) {
	n := GetNumDevices()
	require.GreaterOrEqual(t, n, 0)
	require.Equal(t, n, GetInitialDevice(), "the host comes after the accelerators")
	def := GetDefaultDevice()
	require.Equal(t, 0, def)
	t.Cleanup(func() { SetDefaultDevice(def) })

	require.Empty(t, targetWarnings(t, func() { SetDefaultDevice(GetInitialDevice()) }))
	require.Equal(t, GetInitialDevice(), GetDefaultDevice())
	for _, bad := range []int{-7, n + 1, 1 << 20} {
		w := targetWarnings(t, func() { SetDefaultDevice(bad) })
		require.Len(t, w, 1)
		require.Contains(t, w[0], "omp_set_default_device")
		require.Contains(t, w[0], "device "+strconv.Itoa(bad))
		require.Equal(t, GetInitialDevice(), GetDefaultDevice(), "an invalid number changes nothing")
	}
}

func TestTargetBadInputWarnsOnce(t *testing.T) {
	host := GetInitialDevice()
	bad := host + 1
	p := pages(t, 1)
	tests := []struct {
		name string
		call func() bool // true: the result is the failure result
		want []string    // in the one warning line
	}{
		{"lock nil", func() bool { return TargetLockMem(nil, 8, host) == nil }, []string{"llvm_omp_target_lock_mem", "nil pointer"}},
		{"lock size 0", func() bool { return TargetLockMem(p, 0, host) == nil }, []string{"llvm_omp_target_lock_mem", "size 0"}},
		{"lock bad device", func() bool { return TargetLockMem(p, 8, bad) == nil }, []string{"llvm_omp_target_lock_mem", "device " + strconv.Itoa(bad), "no such device"}},
		{"lock negative device", func() bool { return TargetLockMem(p, 8, -5) == nil }, []string{"llvm_omp_target_lock_mem", "device -5"}},
		{"unlock nil", func() bool { TargetUnlockMem(nil, host); return true }, []string{"llvm_omp_target_unlock_mem", "nil pointer"}},
		{"unlock never locked", func() bool { TargetUnlockMem(p, host); return true }, []string{"llvm_omp_target_unlock_mem", "not locked"}},
		{"unlock bad device", func() bool { TargetUnlockMem(p, bad); return true }, []string{"llvm_omp_target_unlock_mem", "no such device"}},
		{"alloc size 0", func() bool { return TargetAlloc(0, host) == nil }, []string{"omp_target_alloc", "size 0"}},
		{"alloc bad device", func() bool { return TargetAlloc(8, bad) == nil }, []string{"omp_target_alloc", "no such device"}},
		{"alloc host bad device", func() bool { return TargetAllocHost(8, -7) == nil }, []string{"llvm_omp_target_alloc_host", "device -7"}},
		{"alloc shared size 0", func() bool { return TargetAllocShared(0, host) == nil }, []string{"llvm_omp_target_alloc_shared", "size 0"}},
		{"alloc device bad device", func() bool { return TargetAllocDevice(8, bad) == nil }, []string{"llvm_omp_target_alloc_device", "no such device"}},
		{"free unknown pointer", func() bool { TargetFree(p, host); return true }, []string{"omp_target_free", "not allocated"}},
		{"free bad device", func() bool { TargetFree(p, bad); return true }, []string{"omp_target_free", "no such device"}},
		{"free host unknown pointer", func() bool { TargetFreeHost(p, host); return true }, []string{"llvm_omp_target_free_host", "not allocated"}},
		{"memcpy nil", func() bool { return TargetMemcpy(nil, p, 8, 0, 0, host, host) != 0 }, []string{"omp_target_memcpy", "nil pointer"}},
		{"memcpy bad dst device", func() bool { return TargetMemcpy(p, p, 8, 0, 8, bad, host) != 0 }, []string{"omp_target_memcpy", "memcpy to device " + strconv.Itoa(bad)}},
		{"memcpy bad src device", func() bool { return TargetMemcpy(p, p, 8, 0, 8, host, -3) != 0 }, []string{"omp_target_memcpy", "memcpy from device -3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var failed bool
			w := targetWarnings(t, func() { failed = tt.call() })
			require.True(t, failed, "the failure result")
			require.Len(t, w, 1, "exactly one warning: %q", w)
			for _, s := range tt.want {
				require.Contains(t, w[0], s)
			}
		})
	}
	t.Run("quiet no-ops", func(t *testing.T) {
		w := targetWarnings(t, func() {
			TargetFree(nil, host) // as free(NULL)
			TargetFreeDevice(nil, bad)
			require.Equal(t, 0, TargetMemcpy(nil, nil, 0, 0, 0, bad, bad), "nothing to copy")
		})
		require.Empty(t, w)
	})
}

// Lock references nest: a range inside a locked one adds a reference, any
// interior pointer unlocks, the last unlock releases the pages, and a range
// that runs past a locked one is refused. VmLck tells what the kernel locked.
func TestTargetLockNesting(t *testing.T) {
	host := GetInitialDevice()
	pg := uintptr(os.Getpagesize())
	kb := int(pg / 1024)
	base := vmLckKB(t)
	p := pages(t, 4)

	var outer, inner unsafe.Pointer
	require.Empty(t, targetWarnings(t, func() {
		outer = TargetLockMem(p, 4*pg, host)
		inner = TargetLockMem(add(p, 100), 50, host)
	}))
	require.Equal(t, p, outer, "the host device's address is the host address")
	require.Equal(t, add(p, 100), inner)
	require.Equal(t, base+4*kb, vmLckKB(t), "the inner lock locks nothing more")

	w := targetWarnings(t, func() { require.Nil(t, TargetLockMem(add(p, 2*pg), 4*pg, host)) })
	require.Len(t, w, 1)
	require.Contains(t, w[0], "overlap")
	require.Equal(t, base+4*kb, vmLckKB(t), "a refused lock leaves nothing behind")

	require.Empty(t, targetWarnings(t, func() { TargetUnlockMem(add(p, 3*pg), host) }), "any interior pointer unlocks")
	require.Equal(t, base+4*kb, vmLckKB(t), "one reference remains")
	require.Empty(t, targetWarnings(t, func() { TargetUnlockMem(p, host) }))
	require.Equal(t, base, vmLckKB(t))
	w = targetWarnings(t, func() { TargetUnlockMem(p, host) })
	require.Len(t, w, 1, "an extra unlock warns")
	require.Contains(t, w[0], "not locked")

	// Two ranges sharing one page: the page stays locked until both go.
	a, b := p, add(p, 100)
	require.NotNil(t, TargetLockMem(a, 100, host))
	require.NotNil(t, TargetLockMem(b, 100, host))
	require.Equal(t, base+kb, vmLckKB(t))
	TargetUnlockMem(a, host)
	require.Equal(t, base+kb, vmLckKB(t), "the shared page stays locked for b")
	TargetUnlockMem(b, host)
	require.Equal(t, base, vmLckKB(t))
}

// The semantics of LLVM's offloading test "prelock", in our words, on the
// host device: memory locked up front is mapped whole and in part, through
// its own pointer and through the one the lock returned; every transfer
// sees the data; unlocking at the end releases it.
func TestTargetPrelock(t *testing.T) {
	dev := GetInitialDevice()
	const n = 100
	base := vmLckKB(t)
	mem := pages(t, 1)
	vals := unsafe.Slice((*int32)(mem), n)
	for i := range vals {
		vals[i] = int32(i)
	}
	locked := TargetLockMem(mem, n*4, dev)
	require.NotNil(t, locked)
	require.Greater(t, vmLckKB(t), base)

	// mapTofrom copies [from, from+count) of host to the device, adds one
	// to each element there, and copies it back.
	mapTofrom := func(host unsafe.Pointer, from, count uintptr) {
		d := TargetAlloc(count*4, dev)
		require.NotNil(t, d)
		defer TargetFree(d, dev)
		require.Zero(t, TargetMemcpy(d, host, count*4, 0, from*4, dev, dev))
		for i, v := range unsafe.Slice((*int32)(d), count) {
			unsafe.Slice((*int32)(d), count)[i] = v + 1
		}
		require.Zero(t, TargetMemcpy(host, d, count*4, from*4, 0, dev, dev))
	}
	mapTofrom(mem, 0, n)
	mapTofrom(mem, 10, 10)
	mapTofrom(locked, 0, n)
	mapTofrom(locked, 10, 10)
	TargetUnlockMem(mem, dev)
	require.Equal(t, base, vmLckKB(t))

	for i, v := range vals {
		want := int32(i + 2)
		if i >= 10 && i < 20 {
			want = int32(i + 4)
		}
		require.Equal(t, want, v, "element %d", i)
	}
}

func TestTargetAllocKinds(t *testing.T) {
	host := GetInitialDevice()
	pg := uintptr(os.Getpagesize())
	tests := []struct {
		name   string
		alloc  func(uintptr, int) unsafe.Pointer
		free   func(unsafe.Pointer, int)
		pinned bool
	}{
		{"omp_target_alloc", TargetAlloc, TargetFree, false},
		{"device", TargetAllocDevice, TargetFreeDevice, false},
		{"shared", TargetAllocShared, TargetFreeShared, false},
		{"host", TargetAllocHost, TargetFreeHost, true},
		{"host freed by omp_target_free", TargetAllocHost, TargetFree, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := vmLckKB(t)
			var p unsafe.Pointer
			require.Empty(t, targetWarnings(t, func() { p = tt.alloc(3*pg, host) }))
			require.NotNil(t, p)
			b := unsafe.Slice((*byte)(p), 3*pg)
			require.Equal(t, byte(0), b[len(b)-1])
			b[0], b[len(b)-1] = 1, 2
			locked := 0
			if tt.pinned {
				locked = 3 * int(pg/1024)
			}
			require.Equal(t, base+locked, vmLckKB(t))
			require.Empty(t, targetWarnings(t, func() { tt.free(p, host) }))
			require.Equal(t, base, vmLckKB(t))
		})
	}
	t.Run("free with the wrong kind", func(t *testing.T) {
		p := TargetAllocHost(64, host)
		require.NotNil(t, p)
		w := targetWarnings(t, func() { TargetFreeDevice(p, host) })
		require.Len(t, w, 1)
		require.Contains(t, w[0], "allocated as host memory")
		require.Empty(t, targetWarnings(t, func() { TargetFreeHost(p, host) }), "still allocated: the right free works")
	})
	t.Run("a lock inside host memory holds it", func(t *testing.T) {
		p := TargetAllocHost(pg, host)
		require.NotNil(t, p)
		require.Equal(t, add(p, 8), TargetLockMem(add(p, 8), 16, host))
		w := targetWarnings(t, func() { TargetFreeHost(p, host) })
		require.Len(t, w, 1)
		require.Contains(t, w[0], "still referenced")
		TargetUnlockMem(add(p, 8), host)
		require.Empty(t, targetWarnings(t, func() { TargetFreeHost(p, host) }))
	})
}

func TestTargetMemcpyOffsets(t *testing.T) {
	host := GetInitialDevice()
	src, dst := pages(t, 1), pages(t, 1)
	copy(unsafe.Slice((*byte)(src), 32), "0123456789abcdefghijklmnopqrstuv")
	require.Zero(t, TargetMemcpy(dst, src, 6, 100, 10, host, host))
	require.Equal(t, "abcdef", string(unsafe.Slice((*byte)(add(dst, 100)), 6)))

	d := TargetAllocDevice(64, host)
	require.NotNil(t, d)
	defer TargetFreeDevice(d, host)
	require.Zero(t, TargetMemcpy(d, src, 32, 0, 0, host, host))
	require.Zero(t, TargetMemcpy(dst, d, 4, 0, 28, host, host))
	require.Equal(t, "stuv", string(unsafe.Slice((*byte)(dst), 4)))
}

// Lock a buffer for a device, copy through it, unlock. The initial device
// (the host) is there on every machine; an accelerator number works the
// same way.
func ExampleTargetLockMem() {
	host := GetInitialDevice()
	buf := TargetAllocDevice(4096, host) // any host memory not managed by Go's GC
	defer TargetFreeDevice(buf, host)
	copy(unsafe.Slice((*byte)(buf), 5), "hello")

	locked := TargetLockMem(buf, 4096, host) // page-locked until unlocked
	dev := TargetAlloc(64, host)
	defer TargetFree(dev, host)
	if TargetMemcpy(dev, locked, 5, 0, 0, host, host) != 0 {
		return
	}
	TargetUnlockMem(buf, host)
	fmt.Println(string(unsafe.Slice((*byte)(dev), 5)))
	// Output: hello
}
