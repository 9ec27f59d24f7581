package target_test

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/target"
)

const orderingChildEnv = "OMPALLOC_TARGET_ORDERING_CHILD"

// TestSyncCopiesOrderedBeforeQueues runs its child over the fake CUDA
// driver, whose "synchronous" device-to-device and pageable host-to-device
// copies complete late on the legacy stream, as the driver documents, while
// queues are non-blocking streams that do not wait for it.
func TestSyncCopiesOrderedBeforeQueues(t *testing.T) {
	if os.Getenv(orderingChildEnv) != "" {
		t.Skip("in the child")
	}
	lib := fakedrv.Build(t, "fakecuda")
	cmd := exec.Command(os.Args[0], "-test.run=^TestSyncCopiesOrderedBeforeQueuesChild$", "-test.v", "-test.count=1")
	hsa := fakedrv.Build(t, "fakehsa")
	cmd.Env = append(os.Environ(), orderingChildEnv+"=1", "OMPALLOC_CUDA_LIBRARY="+lib, "OMPALLOC_HSA_LIBRARY="+hsa,
		"OMPALLOC_DISABLE_HSA=", "FAKEHSA_GPUS=2", "FAKECUDA_DEVICES=2", "FAKECUDA_FAIL=", "FAKEHSA_FAIL=", "FAKECUDA_LEGACY_DELAY_US=20000")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestSyncCopiesOrderedBeforeQueuesChild", "%s", out)
}

// On every accelerator, every copy that returns as complete (no queue) is
// seen by the next copy on a queue of the device: the device-to-device ones (target.Memcpy on one
// device, kmp.TargetMemcpy) and host-to-device ones from pageable memory
// (Memcpy from the host).
func TestSyncCopiesOrderedBeforeQueuesChild(t *testing.T) {
	if os.Getenv(orderingChildEnv) == "" {
		t.Skip("run by TestSyncCopiesOrderedBeforeQueues")
	}
	require.Equal(t, 4, target.NumDevices(), "2 CUDA, 2 AMD")
	for dev := range target.NumDevices() {
		d, err := target.Get(dev)
		require.NoError(t, err)
		t.Run(d.String(), func(t *testing.T) { syncCopiesOrdered(t, d) })
	}
}

func syncCopiesOrdered(t *testing.T, d *target.Device) {
	host, dev := target.InitialDevice(), d.ID
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()

	const n = 1 << 20
	a, err := d.Alloc(target.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(target.MemDevice, a)) }()
	h, back := pageable(t, n), pageable(t, n)

	// put makes a hold seed, completely: on the queue, synchronized.
	put := func(seed byte) {
		fillBytes(h, n, seed)
		require.NoError(t, target.MemcpyAsync(a, h, n, dev, host, q))
		require.NoError(t, q.Synchronize(context.Background()))
	}
	var b uintptr // a fresh destination for each case
	for i, tc := range []struct {
		name string
		copy func() error // writes a's bytes (or h's) to b, complete on return
	}{
		{"target.Memcpy on one device", func() error { return target.Memcpy(b, a, n, dev, dev) }},
		{"kmp.TargetMemcpy on one device", func() error {
			if kmp.TargetMemcpy(cmem.Ptr(b), cmem.Ptr(a), n, 0, 0, dev, dev) != 0 {
				return os.ErrInvalid
			}
			return nil
		}},
		{"target.Memcpy from the host, pageable", func() error { return target.Memcpy(b, h, n, dev, host) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := byte(10 + i)
			b, err = d.Alloc(target.MemDevice, n)
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Free(target.MemDevice, b)) }()
			put(seed)
			require.NoError(t, tc.copy())
			clear(cmem.Bytes(back, n))
			require.NoError(t, target.MemcpyAsync(back, b, n, host, dev, q))
			require.NoError(t, q.Synchronize(context.Background()))
			require.True(t, hasBytes(back, n, seed), "the queue read %s's destination before the copy had landed", tc.name)
		})
	}
}

func pageable(t *testing.T, n uintptr) uintptr {
	t.Helper()
	c, err := dl.C()
	require.NoError(t, err)
	p, err := c.Map(n)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Unmap(p, n) })
	return p
}

func fillBytes(p, n uintptr, seed byte) {
	b := cmem.Bytes(p, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
}

func hasBytes(p, n uintptr, seed byte) bool {
	b := cmem.Bytes(p, n)
	for i := range b {
		if b[i] != byte(i*7)^seed {
			return false
		}
	}
	return true
}
