package gputest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/memprof"
	"github.com/ompalloc/ompalloc/target"
)

// Issue 31 item 2: ompalloc's device-memory figures, checked against the
// fake drivers' own counts: the bytes the driver says are in use are what
// ompalloc says it reserved, and the driver's free and total are its own.
func TestMemoryStatsMatchTheDriver(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	for i, d := range fake.Devices() {
		t.Run(d.String(), func(t *testing.T) {
			d.TrimPool(0)
			d.ResetPeakMemoryStats()
			before := d.MemoryStats()
			require.Equal(t, fake.Counts().DeviceBytes[i], before.Reserved, "nothing of ompalloc's but what it reports")

			direct, err := target.AllocArray[byte](d, target.MemDevice, 3<<20)
			require.NoError(t, err)
			pooled, err := d.PoolAlloc(1<<20, nil)
			require.NoError(t, err)
			st := d.MemoryStats()
			drv := fake.Counts().DeviceBytes[i]
			require.Equal(t, before.Allocated+4<<20, st.Allocated)
			require.Equal(t, st.Allocated, st.PeakAllocated)
			require.Equal(t, drv, st.Reserved, "ompalloc's reserved bytes are the driver's bytes in use")
			require.GreaterOrEqual(t, st.Reserved, st.Allocated)
			require.Equal(t, before.Allocs+2, st.Allocs)
			require.Equal(t, uint64(1<<20), st.PoolInUse-before.PoolInUse)
			require.Equal(t, st.Total, d.Info().Memory)
			require.Equal(t, st.Total-drv, st.Free, "the driver's free memory is its total less what it holds")
			free, total, err := d.MemGetInfo()
			require.NoError(t, err)
			require.Equal(t, st.Free, free)
			require.Equal(t, st.Total, total)

			require.NoError(t, direct.Free())
			require.NoError(t, d.PoolFree(pooled, nil))
			st = d.MemoryStats()
			require.Equal(t, before.Allocated, st.Allocated)
			require.Equal(t, before.Allocated+4<<20, st.PeakAllocated, "the peak stays")
			require.Equal(t, before.Frees+2, st.Frees)
			d.ResetPeakMemoryStats()
			require.Equal(t, before.Allocated, d.MemoryStats().PeakAllocated, "reset: the peak is the current figure")

			// A second free of device memory says so.
			again, err := target.AllocArray[byte](d, target.MemDevice, 4096)
			require.NoError(t, err)
			require.NoError(t, again.Free())
			err = again.Free()
			require.ErrorIs(t, err, target.ErrInvalidArgument)
			require.ErrorContains(t, err, "freed already (a double free)")
			require.NotContains(t, err.Error(), "not allocated by this device")
			blk, err := d.PoolAlloc(4096, nil)
			require.NoError(t, err)
			require.NoError(t, d.PoolFree(blk, nil))
			err = d.PoolFree(blk, nil)
			require.ErrorIs(t, err, target.ErrInvalidArgument)
			require.ErrorContains(t, err, "a device pool block")
			require.ErrorContains(t, err, "freed already (a double free)")
		})
	}
}

// Without the driver's answer (an HSA runtime older than MEMORY_AVAIL) the
// total is still there and the error says why.
func TestMemGetInfoUnsupported(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	t.Setenv("FAKEHSA_NO_MEMORY_AVAIL", "1")
	free, total, err := fake.Devices()[2].MemGetInfo()
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.ErrorContains(t, err, "HSA_AMD_AGENT_INFO_MEMORY_AVAIL")
	require.Zero(t, free)
	require.Equal(t, fake.Devices()[2].Info().Memory, total)
	host, err := target.Get(target.InitialDevice())
	require.NoError(t, err)
	_, _, err = host.MemGetInfo()
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// A timeline recorded on request holds every allocation and free of device
// memory, with the device's figures after each, and writes the JSON the
// ompalloc command draws.
func TestMemoryTimeline(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	target.RecordMemoryHistory(100)
	t.Cleanup(func() { target.RecordMemoryHistory(0) })
	d := fake.Devices()[1]
	base := d.MemoryStats().Allocated
	a, err := target.AllocArray[float32](d, target.MemDevice, 1<<18)
	require.NoError(t, err)
	p, err := d.PoolAlloc(1<<20, nil)
	require.NoError(t, err)
	require.NoError(t, d.PoolFree(p, nil))
	require.NoError(t, a.Free())
	target.RecordMemoryHistory(0)
	one, err := target.AllocArray[byte](d, target.MemDevice, 1) // not recorded
	require.NoError(t, err)
	require.NoError(t, one.Free())
	ev := target.MemoryHistory()
	require.Len(t, ev, 4, "%+v", ev)
	want := []struct {
		op, path  string
		allocated uint64
	}{{"alloc", "direct", base + 1<<20}, {"alloc", "pool", base + 2<<20}, {"free", "pool", base + 1<<20}, {"free", "direct", base}}
	for i, w := range want {
		require.Equal(t, w.op, ev[i].Op, "%d", i)
		require.Equal(t, w.path, ev[i].Path, "%d", i)
		require.Equal(t, w.allocated, ev[i].Allocated, "%d", i)
		require.Equal(t, uint64(1<<20), ev[i].Bytes)
		require.Equal(t, d.ID, ev[i].Device)
		require.GreaterOrEqual(t, ev[i].Reserved, ev[i].Allocated)
		if i > 0 {
			require.GreaterOrEqual(t, ev[i].T, ev[i-1].T)
		}
	}
	var buf bytes.Buffer
	require.NoError(t, target.WriteMemoryHistory(&buf))
	var doc struct {
		Schema string               `json:"schema"`
		Events []target.MemoryEvent `json:"events"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc))
	require.Equal(t, target.MemoryTimelineSchema, doc.Schema)
	require.Equal(t, ev, doc.Events)
	_ = os.Getenv
}

// The device-memory figures are in memprof's expvar "ompalloc", per device
// opened, and sampled device allocations are in its heap profile with
// their stacks, labelled with the device.
func TestDeviceMemoryInExpvarAndProfile(t *testing.T) {
	fake := New(t, CUDA(2), HSA(1))
	d := fake.Devices()[2]
	memprof.SetRate(1) // every allocation
	t.Cleanup(func() { memprof.SetRate(0) })
	blk, err := d.PoolAlloc(3<<20, nil)
	require.NoError(t, err)
	var vars struct {
		DeviceMemory []struct {
			Device    int    `json:"device"`
			Plugin    string `json:"plugin"`
			Allocated uint64 `json:"allocated"`
			Reserved  uint64 `json:"reserved"`
			Total     uint64 `json:"total"`
		} `json:"device_memory"`
	}
	require.NoError(t, json.Unmarshal([]byte(expvar.Get("ompalloc").String()), &vars))
	var found bool
	for _, e := range vars.DeviceMemory {
		if e.Device == d.ID {
			found = true
			require.Equal(t, "amdgpu", e.Plugin)
			require.Equal(t, d.MemoryStats().Allocated, e.Allocated)
			require.GreaterOrEqual(t, e.Allocated, uint64(3<<20))
			require.Equal(t, fake.Counts().DeviceBytes[2], e.Reserved, "the driver's own count")
			require.Equal(t, d.Info().Memory, e.Total)
		}
	}
	require.True(t, found, "%s", expvar.Get("ompalloc").String())

	var prof bytes.Buffer
	require.NoError(t, memprof.WriteHeapProfile(&prof))
	zr, err := gzip.NewReader(&prof)
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.Contains(t, string(raw), fmt.Sprintf("device %d", d.ID), "the memspace label")
	require.Contains(t, string(raw), "device pool", "the allocator label")
	require.Contains(t, string(raw), "TestDeviceMemoryInExpvarAndProfile", "the allocating stack")
	require.NoError(t, d.PoolFree(blk, nil))
}
