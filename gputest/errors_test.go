package gputest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/target"
)

// Issue 31 item 4: a driver's error reaches the user saying each thing
// once: the device by its OpenMP number (never the plugin's own "amdgpu
// device 0" for device 2), the operation, then the driver's function,
// code and text.
func TestDriverErrorsSayEachThingOnce(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	for _, tc := range []struct {
		dev               int
		alloc, copy, code string
	}{
		{0, "cuMemAlloc", "cuMemcpyHtoDAsync", "CUDA_ERROR_UNKNOWN (999)"},
		{2, "hsa_amd_memory_pool_allocate", "hsa_amd_memory_async_copy", "HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008)"},
	} {
		d := fake.Devices()[tc.dev]
		t.Run(d.Plugin(), func(t *testing.T) {
			check := func(err error, op, fn string) {
				t.Helper()
				require.Error(t, err)
				msg := err.Error()
				require.True(t, strings.HasPrefix(msg, fmt.Sprintf("device %d: %s", d.ID, op)), "%s", msg)
				require.Equal(t, 1, strings.Count(msg, op), "the operation once: %s", msg)
				require.Equal(t, 1, strings.Count(msg, "device "+fmt.Sprint(d.ID)+":"), "%s", msg)
				require.NotContains(t, msg, "CUDA device", "the plugin's numbering: %s", msg)
				require.NotContains(t, msg, "amdgpu device", "the plugin's numbering: %s", msg)
				require.Contains(t, msg, fn+": "+tc.code)
			}
			fake.Fail(t, tc.alloc, 1)
			_, err := target.AllocArray[byte](d, target.MemDevice, 4096)
			check(err, "alloc of 4096 bytes of device memory", tc.alloc)

			a, err := target.AllocArray[byte](d, target.MemDevice, 1<<18)
			require.NoError(t, err)
			defer func() { require.NoError(t, a.Free()) }()
			q, err := d.NewQueue()
			require.NoError(t, err)
			defer func() { require.NoError(t, q.Close()) }()
			fake.Fail(t, tc.copy, 1)
			err = target.CopyToDevice(a, make([]byte, 1<<18), q)
			check(err, "host-to-device of 262144 bytes", tc.copy)
		})
	}
}

// Issue 31 item 4, the sweep: the main failure paths a user meets, on both
// fakes, each message saying the device by its OpenMP number once, the
// operation once, then the driver's function and code; never the plugin's
// own numbering, a repeated prefix, or a second line.
func TestDriverErrorMessages(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	type step struct {
		name, op string
		fail     [2]string // the driver function made to fail: CUDA's, HSA's
		run      func(t *testing.T, d *target.Device, q *target.Queue) error
	}
	steps := []step{
		{"alloc host", "alloc of 4096 bytes of host memory", [2]string{"cuMemHostAlloc", "hsa_amd_memory_pool_allocate"},
			func(t *testing.T, d *target.Device, _ *target.Queue) error {
				_, err := target.AllocArray[byte](d, target.MemHost, 4096)
				return err
			}},
		{"free", "free of device memory at ", [2]string{"cuMemFree", "hsa_amd_memory_pool_free"},
			func(t *testing.T, d *target.Device, _ *target.Queue) error {
				m, err := target.AllocArray[byte](d, target.MemDevice, 4096)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, m.Free()) }) // the driver kept it
				return m.Free()
			}},
		{"new queue", "new queue", [2]string{"cuStreamCreate", ""},
			func(t *testing.T, d *target.Device, _ *target.Queue) error {
				_, err := d.NewQueue()
				return err
			}},
		{"pool alloc", "pool alloc of 1048576 bytes", [2]string{"cuMemAllocFromPoolAsync", "hsa_amd_memory_pool_allocate"},
			func(t *testing.T, d *target.Device, q *target.Queue) error {
				d.TrimPool(0) // a miss: the driver is asked
				_, err := d.PoolAlloc(1<<20, q)
				return err
			}},
		{"memory info", "memory info", [2]string{"cuMemGetInfo", "hsa_agent_get_info"},
			func(t *testing.T, d *target.Device, _ *target.Queue) error {
				_, _, err := d.MemGetInfo()
				return err
			}},
		{"retrieve", "device-to-host of 4096 bytes", [2]string{"cuMemcpyDtoHAsync", "hsa_amd_memory_async_copy"},
			func(t *testing.T, d *target.Device, q *target.Queue) error {
				a, err := target.AllocArray[byte](d, target.MemDevice, 4096)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, a.Free()) })
				return target.CopyFromDevice(make([]byte, 4096), a, q)
			}},
		{"lock", "lock 0x", [2]string{"cuMemHostRegister", "hsa_amd_memory_lock"},
			func(t *testing.T, d *target.Device, _ *target.Queue) error {
				buf := make([]byte, 1<<16)
				_, err := d.LockMem(uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
				runtime.KeepAlive(buf)
				return err
			}},
		{"synchronize", "synchronize", [2]string{"cuStreamSynchronize", ""},
			func(t *testing.T, d *target.Device, q *target.Queue) error {
				return q.Synchronize(context.Background())
			}},
	}
	for _, dev := range []int{1, 2} {
		d := fake.Devices()[dev]
		vendor := map[string]int{"cuda": 0, "amdgpu": 1}[d.Plugin()]
		code := [2]string{"CUDA_ERROR_UNKNOWN (999)", "HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008)"}[vendor]
		for _, s := range steps {
			fn := s.fail[vendor]
			if fn == "" {
				continue // the HSA plugin makes no driver call there
			}
			t.Run(d.Plugin()+"/"+s.name, func(t *testing.T) {
				q, err := d.NewQueue()
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, q.Close()) })
				nth := 1
				if fn == "hsa_agent_get_info" || fn == "hsa_amd_memory_pool_allocate" {
					nth = 0 // every call until the test ends: the first may be another's
				}
				fake.Fail(t, fn, nth)
				err = s.run(t, d, q)
				require.Error(t, err)
				msg := err.Error()
				prefix := fmt.Sprintf("device %d: %s", d.ID, s.op)
				require.True(t, strings.HasPrefix(msg, prefix), "want %q first: %s", prefix, msg)
				require.Equal(t, 1, strings.Count(msg, s.op), "the operation once: %s", msg)
				require.Equal(t, 1, strings.Count(msg, fmt.Sprintf("device %d", d.ID)), "the device once: %s", msg)
				require.NotContains(t, msg, "CUDA device", "the plugin's numbering: %s", msg)
				require.NotContains(t, msg, "amdgpu device", "the plugin's numbering: %s", msg)
				require.NotContains(t, msg, "\n", "one line: %q", msg)
				require.Contains(t, msg, fn+": "+code, "%s", msg)
				t.Log(msg)
			})
		}
	}
}
