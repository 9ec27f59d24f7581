package cuda

import (
	"testing"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// The plugin's own cost over the fake driver (whose calls are cheap): purego,
// the locked thread and the context switch per call.

func BenchmarkLockUnlock(b *testing.B) {
	d := benchDev(b)
	p, _ := hostBufB(b, 1<<16)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := d.LockHost(p, 1<<16); err != nil {
			b.Fatal(err)
		}
		if err := d.UnlockHost(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCopySync64B(b *testing.B) {
	d := benchDev(b)
	src, _ := hostBufB(b, 4096)
	a, err := d.Alloc(plugin.MemDevice, 64)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Free(plugin.MemDevice, a)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := d.Copy(a, src, 64, plugin.HostToDevice, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDev(b *testing.B) *device {
	b.Helper()
	if fakeLib == "" {
		b.Skipf("fake CUDA driver not built: %v", fakeErr)
	}
	sharedOnce.Do(func() { shared = newPlugin(defaultDriver) })
	if err := shared.Init(); err != nil {
		b.Fatal(err)
	}
	return shared.devices[0]
}

func hostBufB(b *testing.B, n uintptr) (uintptr, []byte) {
	b.Helper()
	c, err := dl.C()
	if err != nil {
		b.Fatal(err)
	}
	p, err := c.Map(n)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Unmap(p, n) })
	return p, cmem.Bytes(p, n)
}
