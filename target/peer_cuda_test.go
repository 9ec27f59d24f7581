package target

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

const peerChildEnv = "OMPALLOC_TARGET_PEER_CHILD"

// Memcpy and MemcpyAsync between two fake CUDA GPUs: device to device with
// cuMemcpyPeerAsync where they reach each other (FAKECUDA_PEER=all, an
// NVLink node), through pinned host buffers where they do not (none).
func TestCUDAPeerCopies(t *testing.T) {
	if os.Getenv(peerChildEnv) != "" {
		t.Skip("in the child")
	}
	lib := fakedrv.Build(t, "fakecuda")
	for _, peer := range []string{"all", "none"} {
		t.Run(peer, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestCUDAPeerCopiesChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), peerChildEnv+"=1", "OMPALLOC_CUDA_LIBRARY="+lib, "OMPALLOC_DISABLE_HSA=1",
				"FAKECUDA_DEVICES=2", "FAKECUDA_FAIL=", "FAKECUDA_PEER="+peer)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "--- PASS: TestCUDAPeerCopiesChild", "%s", out)
		})
	}
}

func TestCUDAPeerCopiesChild(t *testing.T) {
	if os.Getenv(peerChildEnv) == "" {
		t.Skip("run by TestCUDAPeerCopies")
	}
	peer := os.Getenv("FAKECUDA_PEER") == "all"
	lib := os.Getenv("OMPALLOC_CUDA_LIBRARY")
	calls := func(name string) int {
		b := append([]byte(name), 0)
		return int(dlcall.Call(hook(t, lib, "fakecuda_calls"), uintptr(unsafePointer(b))))
	}
	require.Equal(t, 2, NumDevices())
	d0, _ := Get(0)
	d1, _ := Get(1)
	const n = 9 << 20 // three bounce chunks
	a, err := d0.Alloc(MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d0.Free(MemDevice, a)) }()
	b, err := d1.Alloc(MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d1.Free(MemDevice, b)) }()
	h := hostMem(t, n)
	fill(h, n, 21)
	require.NoError(t, Memcpy(a, h, n, 0, InitialDevice()))

	peers, regs := calls("cuMemcpyPeerAsync"), calls("cuMemHostRegister")
	require.NoError(t, Memcpy(b, a, n, 1, 0))
	if peer {
		require.Equal(t, peers+1, calls("cuMemcpyPeerAsync"), "one device-to-device copy")
		require.Equal(t, regs, calls("cuMemHostRegister"), "no host buffer")
	} else {
		require.Equal(t, peers, calls("cuMemcpyPeerAsync"))
		require.Equal(t, regs+1, calls("cuMemHostRegister"), "the bounce buffers, pinned once for both devices")
	}
	// Complete on return: a queue of the destination reads it.
	q, err := d1.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	back := hostMem(t, n)
	require.NoError(t, d1.retrieve(back, b, n, q))
	require.NoError(t, q.Synchronize(context.Background()))
	require.True(t, hasFill(back, n, 21))

	// On a queue: in its order, with the host copies around it.
	fill(h, n, 22)
	require.NoError(t, MemcpyAsync(b, h, n, 1, InitialDevice(), q))
	require.NoError(t, MemcpyAsync(a, b, n, 0, 1, q))
	clearMem(back, n)
	q0, err := d0.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q0.Close()) }()
	require.NoError(t, q.Synchronize(context.Background())) // the copy into a is done; then device 0's queue reads it
	require.NoError(t, MemcpyAsync(back, a, n, InitialDevice(), 0, q0))
	require.NoError(t, q0.Synchronize(context.Background()))
	require.True(t, hasFill(back, n, 22))
	require.Zero(t, d0.Registry().Stats().Entries)
	require.Zero(t, d1.Registry().Stats().Entries)
}
