package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

// Issue 27 item 11: pinning two small slices that share a page failed on
// CUDA with the driver's 712 (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
// the driver pins whole pages and refuses a page twice) where HSA locks
// both. Registrations are now of whole pages, shared by reference count:
// a range whose pages are registered already (for another range, on any
// device) shares them, a range running into a new page registers only that
// page, and a page goes with the last lock on it.
func TestSmallRangesSharingAPage(t *testing.T) {
	d0, d1 := dev(t, 0), dev(t, 1)
	p, b := hostBuf(t, 3*hostPage)
	regs, reg := live(t, liveRegistered), calls(t, "cuMemHostRegister")

	a, bb, c := p+100, p+1000, p+hostPage-64 // c runs into the second page
	da, err := d0.LockHost(a, 100)
	require.NoError(t, err)
	db, err := d1.LockHost(bb, 200)
	require.NoError(t, err, "a second range in the page shares its registration")
	require.Equal(t, da+900, db)
	dc, err := d0.LockHost(c, 128)
	require.NoError(t, err, "a range running into the next page")
	require.Equal(t, da+(c-a), dc)
	require.Equal(t, reg+2, calls(t, "cuMemHostRegister"), "each page registered once")
	require.Equal(t, regs+2, live(t, liveRegistered))

	// A copy into the range over both pages lands (one part per page).
	src, sb := hostBuf(t, 128)
	pattern(sb, 0x3c)
	m, err := d0.Alloc(plugin.MemDevice, 128)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d0.Free(plugin.MemDevice, m)) })
	require.NoError(t, d0.Copy(m, src, 128, plugin.HostToDevice, nil))
	require.NoError(t, d0.Copy(c, m, 128, plugin.DeviceToHost, nil))
	require.Equal(t, sb, b[c-p:c-p+128])

	require.NoError(t, d0.UnlockHost(a))
	require.NoError(t, d1.UnlockHost(bb))
	require.Equal(t, regs+2, live(t, liveRegistered), "c still holds both pages")
	require.NoError(t, d0.UnlockHost(c))
	require.Equal(t, regs, live(t, liveRegistered), "the last lock on a page unregisters it")
	require.ErrorIs(t, d0.UnlockHost(c), ErrNotLocked)
}
