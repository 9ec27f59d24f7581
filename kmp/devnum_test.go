package kmp

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/target"
)

// deviceRoutine is one routine of this package that takes a device number,
// called with dev for every device argument; it returns what the test
// compares (a result that does not depend on addresses) and undoes what it
// did.
type deviceRoutine struct {
	name string
	call func(t *testing.T, dev int) any
	ok   any // the answer on the initial device
	bad  any // the failure answer (omp_invalid_device)
}

func deviceRoutines(t *testing.T) []deviceRoutine {
	host := GetInitialDevice()
	buf := hostBytes(t, 4096)
	x := unsafe.Pointer(&buf[0])
	other := hostBytes(t, 4096)
	y := unsafe.Pointer(&other[0])
	dims := []uintptr{4, 8}
	alloc := func(a func(uintptr, int) unsafe.Pointer, f func(unsafe.Pointer, int)) func(*testing.T, int) any {
		return func(_ *testing.T, dev int) any {
			p := a(4096, dev)
			if p == nil {
				return false
			}
			unsafe.Slice((*byte)(p), 4096)[4095] = 1 // host memory on the initial device
			f(p, dev)
			return true
		}
	}
	// undone reports whether undo with dev undid what do did on the host:
	// undoing it again with the host's number then warns (nothing is left
	// to undo); if it does not, that second call was the one that undid it.
	undone := func(do func(t *testing.T), undo func(dev int)) func(*testing.T, int) any {
		return func(t *testing.T, dev int) any {
			do(t)
			undo(dev)
			return captureWarnings(t, func() { undo(host) }) != ""
		}
	}
	freed := func(f func(unsafe.Pointer, int), a func(uintptr, int) unsafe.Pointer) func(*testing.T, int) any {
		var p unsafe.Pointer
		return undone(func(t *testing.T) { p = a(4096, host); require.NotNil(t, p) }, func(dev int) { f(p, dev) })
	}
	task := func(tk *Task) any { return tk.Wait() }
	return []deviceRoutine{
		{"omp_target_alloc", alloc(TargetAlloc, TargetFree), true, false},
		{"llvm_omp_target_alloc_host", alloc(TargetAllocHost, TargetFreeHost), true, false},
		{"llvm_omp_target_alloc_shared", alloc(TargetAllocShared, TargetFreeShared), true, false},
		{"llvm_omp_target_alloc_device", alloc(TargetAllocDevice, TargetFreeDevice), true, false},
		{"omp_target_free", freed(TargetFree, TargetAlloc), true, false},
		{"llvm_omp_target_free_host", freed(TargetFreeHost, TargetAllocHost), true, false},
		{"llvm_omp_target_free_shared", freed(TargetFreeShared, TargetAllocShared), true, false},
		{"llvm_omp_target_free_device", freed(TargetFreeDevice, TargetAllocDevice), true, false},
		{"omp_target_memcpy", func(_ *testing.T, dev int) any {
			buf[7] = 42
			rc := TargetMemcpy(y, x, 4096, 0, 0, dev, dev)
			return rc == 0 && other[7] == 42
		}, true, false},
		{"omp_target_memcpy to the initial device", func(_ *testing.T, dev int) any {
			return TargetMemcpy(y, x, 64, 0, 0, dev, host)
		}, 0, -1},
		{"omp_target_memcpy from the initial device", func(_ *testing.T, dev int) any {
			return TargetMemcpy(y, x, 64, 0, 0, host, dev)
		}, 0, -1},
		{"omp_target_memcpy_async", func(_ *testing.T, dev int) any {
			return task(TargetMemcpyAsync(y, x, 4096, 0, 0, dev, dev))
		}, 0, -1},
		{"omp_target_memcpy_rect", func(_ *testing.T, dev int) any {
			return TargetMemcpyRect(y, x, 8, 2, dims, []uintptr{0, 0}, []uintptr{0, 0}, dims, dims, dev, dev)
		}, 0, -1},
		{"omp_target_memcpy_rect_async", func(_ *testing.T, dev int) any {
			return task(TargetMemcpyRectAsync(y, x, 8, 2, dims, []uintptr{0, 0}, []uintptr{0, 0}, dims, dims, dev, dev))
		}, 0, -1},
		{"omp_target_memset", func(_ *testing.T, dev int) any {
			return TargetMemset(x, 'z', 4096, dev) == x && buf[4095] == 'z'
		}, true, false},
		{"omp_target_memset_async", func(_ *testing.T, dev int) any {
			return task(TargetMemsetAsync(x, 'q', 4096, dev))
		}, 0, -1},
		{"omp_target_is_present", func(_ *testing.T, dev int) any { return TargetIsPresent(x, dev) }, 1, 0},
		{"omp_target_is_accessible", func(_ *testing.T, dev int) any { return TargetIsAccessible(x, 4, dev) }, 1, 0},
		{"omp_get_mapped_ptr", func(_ *testing.T, dev int) any { return GetMappedPtr(x, dev) == x }, true, false},
		// Nothing can be associated on the host: the same refusal for
		// both names of it (LLVM and libgomp refuse it too).
		{"omp_target_associate_ptr", func(_ *testing.T, dev int) any { return TargetAssociatePtr(x, y, 64, 0, dev) }, -1, -1},
		{"omp_target_disassociate_ptr", func(_ *testing.T, dev int) any { return TargetDisassociatePtr(x, dev) }, -1, -1},
		{"llvm_omp_target_lock_mem", func(_ *testing.T, dev int) any {
			p := TargetLockMem(x, 4096, dev)
			if p == nil {
				return false
			}
			TargetUnlockMem(x, host)
			return true
		}, true, false},
		{"llvm_omp_target_unlock_mem", undone(func(t *testing.T) { require.NotNil(t, TargetLockMem(x, 4096, host)) },
			func(dev int) { TargetUnlockMem(x, dev) }), true, false},
		{"omp_set_default_device", func(t *testing.T, dev int) any {
			was := GetDefaultDevice()
			t.Cleanup(func() { SetDefaultDevice(was) })
			SetDefaultDevice(0) // the host where there is no accelerator
			SetDefaultDevice(dev)
			return GetDefaultDevice() == host
		}, true, GetNumDevices() == 0},
		{"omp_get_device_memspace", func(_ *testing.T, dev int) any {
			return GetDeviceMemspace(dev, DefaultMemSpace) == GetDeviceMemspace(host, DefaultMemSpace)
		}, true, false},
		{"omp_get_devices_memspace", func(_ *testing.T, dev int) any {
			ms := GetDevicesMemspace([]int{dev}, HighBwMemSpace)
			return ms != NullMemSpace && ms == GetDevicesMemspace([]int{host}, HighBwMemSpace)
		}, true, false},
		{"omp_get_device_and_host_memspace", func(_ *testing.T, dev int) any {
			return GetDeviceAndHostMemspace(dev, DefaultMemSpace) == GetDeviceAndHostMemspace(host, DefaultMemSpace)
		}, true, false},
		{"omp_get_devices_and_host_memspace", func(_ *testing.T, dev int) any {
			ms := GetDevicesAndHostMemspace([]int{dev}, LargeCapMemSpace)
			return ms != NullMemSpace && ms == GetDevicesAndHostMemspace([]int{host}, LargeCapMemSpace)
		}, true, false},
		{"omp_get_device_allocator", func(_ *testing.T, dev int) any {
			h := GetDeviceAllocator(dev, DefaultMemSpace)
			return h != NullAllocator && h == GetDeviceAllocator(host, DefaultMemSpace)
		}, true, false},
		{"omp_get_devices_allocator", func(_ *testing.T, dev int) any {
			h := GetDevicesAllocator([]int{dev}, DefaultMemSpace)
			return h != NullAllocator && h == GetDevicesAllocator([]int{host}, DefaultMemSpace)
		}, true, false},
		{"omp_get_device_and_host_allocator", func(_ *testing.T, dev int) any {
			h := GetDeviceAndHostAllocator(dev, DefaultMemSpace)
			return h != NullAllocator && h == GetDeviceAndHostAllocator(host, DefaultMemSpace)
		}, true, false},
		{"omp_get_devices_and_host_allocator", func(_ *testing.T, dev int) any {
			h := GetDevicesAndHostAllocator([]int{dev}, DefaultMemSpace)
			return h != NullAllocator && h == GetDevicesAndHostAllocator([]int{host}, DefaultMemSpace)
		}, true, false},
	}
}

// TestInitialDeviceEveryRoutine (issue 29 item 8): every routine that takes
// a device number accepts omp_initial_device as the host and answers as for
// omp_get_initial_device(), warnings included; omp_invalid_device fails it
// with a warning that names omp_invalid_device. Before, -1 was "device -1:
// no such device" (nil from omp_target_alloc, 0 from
// omp_target_is_accessible).
func TestInitialDeviceEveryRoutine(t *testing.T) {
	require.Equal(t, -1, InitialDevice, "omp_initial_device in LLVM's and GCC's omp.h")
	require.Equal(t, -2, InvalidDevice, "omp_invalid_device in LLVM's omp.h")
	host := GetInitialDevice()
	for _, r := range deviceRoutines(t) {
		t.Run(r.name, func(t *testing.T) {
			var byNumber, byName any
			wNumber := captureWarnings(t, func() { byNumber = r.call(t, host) })
			wName := captureWarnings(t, func() { byName = r.call(t, InitialDevice) })
			require.Equal(t, r.ok, byNumber, "with omp_get_initial_device() (%d): %s", host, wNumber)
			require.Equal(t, r.ok, byName, "with omp_initial_device: %s", wName)
			require.Equal(t, wNumber, wName, "the same warnings for both names of the host")
			var bad any
			w := captureWarnings(t, func() { bad = r.call(t, InvalidDevice) })
			require.Equal(t, r.bad, bad, "with omp_invalid_device")
			require.Contains(t, w, "omp_invalid_device (-2)")
			require.Contains(t, w, "runtime error")
		})
	}
}

// TestInvalidDeviceBeforeOtherArguments: omp_invalid_device is reported
// even by calls that would otherwise do nothing, and an _async routine's
// task fails with ErrInvalidDevice (also target.ErrBadDevice).
func TestInvalidDeviceBeforeOtherArguments(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"omp_target_free", func() { TargetFree(nil, InvalidDevice) }},
		{"omp_target_memcpy", func() { require.Equal(t, -1, TargetMemcpy(nil, nil, 0, 0, 0, InvalidDevice, GetInitialDevice())) }},
		{"omp_target_memset", func() { require.Nil(t, TargetMemset(nil, 0, 0, InvalidDevice)) }},
		{"omp_target_alloc", func() { require.Nil(t, TargetAlloc(0, InvalidDevice)) }},
		{"omp_target_is_present", func() { require.Equal(t, 0, TargetIsPresent(nil, InvalidDevice)) }},
		{"omp_target_memcpy_rect", func() {
			require.Equal(t, -1, TargetMemcpyRect(nil, nil, 0, 0, nil, nil, nil, nil, nil, GetInitialDevice(), InvalidDevice))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := captureWarnings(t, c.f)
			require.Contains(t, w, c.name+": omp_invalid_device")
		})
	}
	var err error
	captureWarnings(t, func() { err = TargetMemsetAsync(nil, 0, 0, InvalidDevice).Err() })
	require.ErrorIs(t, err, ErrInvalidDevice)
	require.ErrorIs(t, err, target.ErrBadDevice)
	require.True(t, errors.Is(err, ErrInvalidDevice))
}

// The libgomp tests of OpenMP 5.2's device numbers, ported
// (libgomp.c-c++-common/omp_target_memset.c, get-mapped-ptr-1.c and
// target-is-accessible-1.c, in our own words): their loops start at
// omp_initial_device, and only those iterations failed here.

// TestLibgompTargetMemset: memset on every device from omp_initial_device
// on, at every start and tail up to 31 bytes, then small sizes between
// sentinels, checked through a copy to the host.
func TestLibgompTargetMemset(t *testing.T) { libgompTargetMemset(t) }

// libgompTargetMemset is the test's body; TestOmp6Child runs it too, where
// device 0 is the fake CUDA driver's.
func libgompTargetMemset(t *testing.T) {
	const n = 1024
	host := GetInitialDevice()
	check := make([]byte, n)
	for dev := InitialDevice; dev < GetNumDevices(); dev++ {
		p := TargetAlloc(n, dev)
		require.NotNil(t, p, "omp_target_alloc on device %d", dev)
		read := func() []byte {
			require.Equal(t, 0, TargetMemcpy(unsafe.Pointer(&check[0]), p, n, 0, 0, host, dev))
			return check
		}
		for start := uintptr(0); start < 32; start++ {
			for tail := uintptr(0); tail < 32; tail++ {
				val := byte('0' + start + tail)
				q := unsafe.Add(p, start)
				require.Equal(t, q, TargetMemset(q, int(val), n-start-tail, dev), "device %d start %d tail %d", dev, start, tail)
				got := read()
				for i := start; i < n-start-tail; i++ {
					require.Equal(t, val, got[i], "device %d start %d tail %d byte %d", dev, start, tail, i)
				}
			}
		}
		for start := uintptr(0); start < 32; start++ {
			for size := uintptr(0); size <= 64+32; size++ {
				require.NotNil(t, TargetMemset(p, 'a'-2, n, dev))
				val := byte('0' + start + size%32)
				q := unsafe.Add(p, start)
				require.Equal(t, q, TargetMemset(q, int(val), size, dev))
				if size == 0 {
					continue
				}
				got := read()
				for i := uintptr(0); i < n; i++ {
					want := byte('a' - 2)
					if i >= start && i < start+size {
						want = val
					}
					require.Equal(t, want, got[i], "device %d start %d size %d byte %d", dev, start, size, i)
				}
			}
		}
		TargetFree(p, dev)
	}
}

// TestLibgompMappedPtrAndAccessible: omp_get_mapped_ptr and
// omp_target_is_accessible of the host by either name, and bad numbers.
func TestLibgompMappedPtrAndAccessible(t *testing.T) {
	id, n := GetInitialDevice(), GetNumDevices()
	x := hostBytes(t, 8)
	q := unsafe.Pointer(&x[0])
	w := captureWarnings(t, func() {
		require.Nil(t, GetMappedPtr(q, -6))
		require.Nil(t, GetMappedPtr(q, n+1))
		require.Equal(t, 0, TargetIsAccessible(q, 4, -5))
		require.Equal(t, 0, TargetIsAccessible(q, 4, n+1))
	})
	require.Contains(t, w, "device -6")
	require.Equal(t, q, GetMappedPtr(q, id))
	require.Equal(t, q, GetMappedPtr(q, InitialDevice))
	require.Equal(t, 1, TargetIsAccessible(q, 4, n))
	require.Equal(t, 1, TargetIsAccessible(q, 4, id))
	require.Equal(t, 1, TargetIsAccessible(q, 4, InitialDevice))
}
