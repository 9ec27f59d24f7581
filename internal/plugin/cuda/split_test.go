package cuda

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// A copy whose host range is partly registered and partly pageable, or runs
// over two registrations (two adjacent locks, the 64 GiB pieces of one
// lock), is issued as one copy per part: the driver refuses the first kind
// (CUDA_ERROR_INVALID_VALUE, the note on every memcpy) and promises nothing
// for the second; the fake refuses both.
func TestCopySplitAtRegistrations(t *testing.T) {
	d := dev(t, 0)
	const n = 1 << 16
	mem, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, mem)) }()
	q, err := d.NewQueue()
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Destroy()) }()

	// roundTrip copies k bytes at host to the device and back into a
	// pageable buffer, synchronously and on the queue, and checks the bytes
	// and the number of copies issued per direction.
	roundTrip := func(t *testing.T, host, k uintptr, parts int) {
		t.Helper()
		back, bb := hostBuf(t, k)
		for _, async := range []bool{false, true} {
			var qi plugin.QueueImpl
			if async {
				qi = q
			}
			b := cmem.Bytes(host, k)
			pattern(b, byte(k)+1)
			h2d, d2h := calls(t, "cuMemcpyHtoDAsync"), calls(t, "cuMemcpyDtoHAsync")
			require.NoError(t, d.Copy(mem, host, k, plugin.HostToDevice, qi))
			require.NoError(t, q.Synchronize())
			clear(bb)
			require.NoError(t, d.Copy(back, mem, k, plugin.DeviceToHost, nil))
			require.True(t, bytes.Equal(b, bb), "host to device (async %v)", async)
			clear(b)
			require.NoError(t, d.Copy(host, mem, k, plugin.DeviceToHost, qi))
			require.NoError(t, q.Synchronize())
			require.True(t, bytes.Equal(b, bb), "device to host (async %v)", async)
			require.Equal(t, h2d+parts, calls(t, "cuMemcpyHtoDAsync"), "one copy per part")
			require.Equal(t, d2h+parts+1, calls(t, "cuMemcpyDtoHAsync"))
		}
	}

	t.Run("registered and pageable", func(t *testing.T) {
		buf, _ := hostBuf(t, n)
		_, err := d.LockHost(buf+8192, 8192)
		require.NoError(t, err)
		defer func() { require.NoError(t, d.UnlockHost(buf+8192)) }()
		roundTrip(t, buf+4096, 16384, 3) // pageable, registered, pageable
		roundTrip(t, buf+8192, 4096, 1)  // wholly registered
		roundTrip(t, buf+20480, 4096, 1) // wholly pageable
	})
	t.Run("two adjacent locks", func(t *testing.T) {
		buf, _ := hostBuf(t, n)
		for _, p := range []uintptr{buf, buf + 8192} {
			_, err := d.LockHost(p, 8192)
			require.NoError(t, err)
			defer func() { require.NoError(t, d.UnlockHost(p)) }()
		}
		roundTrip(t, buf+4096, 8192, 2)
	})
	t.Run("the pieces of one lock", func(t *testing.T) {
		const size = MaxRegister + 1<<20
		p := reserve(t, size) // PROT_NONE but for the window copied
		readWrite(t, p+MaxRegister-8192, 16384)
		t.Setenv("FAKECUDA_MAX_REGISTER_GB", "64")
		_, err := d.LockHost(p, size)
		require.NoError(t, err)
		defer func() { require.NoError(t, d.UnlockHost(p)) }()
		roundTrip(t, p+MaxRegister-4096, 8192, 2)
	})
}

// A split copy whose second part the driver refuses returns the error with
// nothing left in flight: the first part, which reads or writes the host
// memory late, has completed, since the caller may free that memory now.
func TestSplitCopyFailureLeavesNothingInFlight(t *testing.T) {
	d := dev(t, 0)
	const n = 1 << 16
	mem, err := d.Alloc(plugin.MemDevice, n)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Free(plugin.MemDevice, mem)) }()
	t.Setenv("FAKECUDA_COPY_DELAY_US", "200000") // read by the stream's worker at creation
	qi, err := d.NewQueue()
	require.NoError(t, err)
	q := qi.(*Queue)
	defer func() { require.NoError(t, q.Destroy()) }()
	buf, _ := hostBuf(t, n)
	_, err = d.LockHost(buf+8192, 8192)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.UnlockHost(buf+8192)) }()

	t.Setenv("FAKECUDA_FAIL", "cuMemcpyHtoDAsync:2=700")
	err = d.Copy(mem, buf+4096, 8192, plugin.HostToDevice, q)
	requireCode(t, err, "cuMemcpyHtoDAsync", 700, "CUDA_ERROR_ILLEGAL_ADDRESS")
	t.Setenv("FAKECUDA_FAIL", "")
	done, err := q.Query()
	require.NoError(t, err)
	require.True(t, done, "the first part completed before the error came back")
}
