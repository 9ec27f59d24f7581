package amdgpu

import "testing"

// The plugin's cost per lock+unlock on the fake runtime (whose calls are a
// mutex and a table scan): two purego calls plus the device's bookkeeping.
func BenchmarkLockUnlock(b *testing.B) {
	if fakePath == "" {
		b.Skip("the fake HSA runtime needs gcc")
	}
	p := New()
	if err := p.Init(); err != nil {
		b.Fatal(err)
	}
	d := p.Devices()[0]
	defer d.Close()
	host := hostBuffer(b, 1<<16)
	for b.Loop() {
		if _, err := d.LockHost(host, 1<<16); err != nil {
			b.Fatal(err)
		}
		if err := d.UnlockHost(host); err != nil {
			b.Fatal(err)
		}
	}
}
