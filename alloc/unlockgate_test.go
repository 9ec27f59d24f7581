package alloc

import (
	"os"
	"os/exec"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
)

// TestTrimUnlockOutsideHeapLock runs its child over the fake drivers with
// their unlock calls held at a gate (issue 19, item 7): cuMemHostUnregister
// and hsa_amd_memory_unlock synchronize with the device, so a Trim giving a
// pinned region back must not hold the heap's lock while it waits for them,
// or every Alloc that needs the heap's central lists waits for the device.
func TestTrimUnlockOutsideHeapLock(t *testing.T) {
	if os.Getenv("OMPALLOC_ALLOC_CHILD") != "" {
		t.Skip("in the child")
	}
	cudaLib := fakedrv.Build(t, "fakecuda")
	hsaLib := fakedrv.Build(t, "fakehsa")
	cmd := exec.Command(os.Args[0], "-test.run=^TestTrimUnlockOutsideHeapLockChild$", "-test.v", "-test.count=1", "-test.timeout=120s")
	cmd.Env = append(os.Environ(), "OMPALLOC_ALLOC_CHILD=unlockgate", "OMPALLOC_PINNED_LIMIT=0",
		"OMPALLOC_CUDA_LIBRARY="+cudaLib, "OMPALLOC_DISABLE_CUDA=", "FAKECUDA_DEVICES=1", "FAKECUDA_FAIL=",
		"OMPALLOC_HSA_LIBRARY="+hsaLib, "OMPALLOC_DISABLE_HSA=", "FAKEHSA_GPUS=1", "FAKEHSA_FAIL=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestTrimUnlockOutsideHeapLockChild", "%s", out)
}

// gateHooks are a fake driver's gate: close or open it, count the calls
// waiting at it.
type gateHooks struct {
	set     func(closed bool)
	waiting func() int
}

func fakeGate(t *testing.T, plug string) gateHooks {
	t.Helper()
	lib, fn, setName, countName := os.Getenv("OMPALLOC_CUDA_LIBRARY"), "cuMemHostUnregister", "fakecuda_gate", "fakecuda_gated"
	if plug == "amdgpu" {
		lib, fn, setName, countName = os.Getenv("OMPALLOC_HSA_LIBRARY"), "hsa_amd_memory_unlock", "fakehsa_gate", "fakehsa_count"
	}
	l, err := dl.Open(dl.Spec{Name: "fake driver", Candidates: []string{lib}})
	require.NoError(t, err)
	set, err := l.Sym(setName)
	require.NoError(t, err)
	cnt, err := l.Sym(countName)
	require.NoError(t, err)
	name := append([]byte(fn), 0)
	gated := append([]byte("gated"), 0)
	return gateHooks{
		set: func(closed bool) {
			c := uintptr(0)
			if closed {
				c = 1
			}
			dlcall.Call(set, uintptr(unsafe.Pointer(&name[0])), c)
		},
		waiting: func() int { return int(int32(dlcall.Call(cnt, uintptr(unsafe.Pointer(&gated[0]))))) },
	}
}

func TestTrimUnlockOutsideHeapLockChild(t *testing.T) {
	if os.Getenv("OMPALLOC_ALLOC_CHILD") != "unlockgate" {
		t.Skip("run by TestTrimUnlockOutsideHeapLock")
	}
	var accels []*target.Device
	for _, d := range target.Devices() {
		if !d.IsHost() {
			accels = append(accels, d)
		}
	}
	require.Len(t, accels, 2, "one fake CUDA device, one fake AMD GPU")
	for _, d := range accels {
		t.Run(d.Plugin(), func(t *testing.T) {
			g := fakeGate(t, d.Plugin())
			t.Cleanup(func() { g.set(false) })
			a, err := New(memspace.Default, WithPinned(true), WithPinDevice(d.ID))
			require.NoError(t, err)
			defer func() { require.NoError(t, a.Destroy()) }()
			keep, err := a.Alloc(64)
			require.NoError(t, err)
			defer func() { require.NoError(t, Free(keep)) }()
			p, err := a.Alloc(64)
			require.NoError(t, err)
			require.NoError(t, Free(p)) // a cached block, in the central lists after Trim
			big, err := a.Alloc(8 << 20)
			require.NoError(t, err)
			require.NoError(t, Free(big)) // a retained huge region: Trim unlocks it

			g.set(true)
			trimmed := make(chan struct{})
			go func() { Trim(); close(trimmed) }()
			for deadline := time.Now().Add(20 * time.Second); g.waiting() == 0; time.Sleep(time.Millisecond) {
				require.True(t, time.Now().Before(deadline), "Trim never reached the unlock")
			}
			got := make(chan error, 1)
			go func() {
				q, err := a.Alloc(64)
				if err == nil {
					err = Free(q)
				}
				got <- err
			}()
			select {
			case err := <-got:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				g.set(false)
				<-trimmed
				t.Fatal("an Alloc of a cached pinned block waited for the trim's unlock")
			}
			// Through the device's registry: a lock of another range, and a
			// pinned block needing a new region (device Hold), do not wait either.
			buf, err := dl.C()
			require.NoError(t, err)
			other, err := buf.Map(1 << 16)
			require.NoError(t, err)
			defer func() { require.NoError(t, buf.Unmap(other, 1<<16)) }()
			for what, f := range map[string]func() error{
				"a lock of another range": func() error {
					_, err := d.LockMem(other, 1<<16) // unlocked below, once the gate opens
					return err
				},
				"a new pinned allocator while ReadPinnedStats waits for the release": func() error {
					go ReadPinnedStats()              // waits for the release in flight
					time.Sleep(50 * time.Millisecond) // let it reach the wait
					b, err := New(memspace.Default, WithPinned(true), WithPinDevice(d.ID))
					if err == nil {
						err = b.Destroy()
					}
					return err
				},
				"an Alloc needing a new pinned region": func() error {
					q, err := a.Alloc(6 << 20)
					if err == nil {
						err = Free(q)
					}
					return err
				},
			} {
				go func() { got <- f() }()
				select {
				case err := <-got:
					require.NoError(t, err, what)
				case <-time.After(5 * time.Second):
					g.set(false)
					<-trimmed
					t.Fatalf("%s waited for the trim's unlock", what)
				}
			}
			select {
			case <-trimmed:
				t.Fatal("Trim returned while its unlock was held")
			default:
			}
			g.set(false)
			<-trimmed
			require.NoError(t, d.UnlockMem(other))
			st := ReadPinnedStats()
			require.Equal(t, uintptr(4<<20+6<<20), st.Bytes, "the 8 MiB region given back; the live block's chunk and the 6 MiB region freed meanwhile (kept for reuse) stay")
		})
	}
}
