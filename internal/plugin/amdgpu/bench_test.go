package amdgpu

import (
	"testing"

	"github.com/ompalloc/ompalloc/internal/plugin"
)

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

// A synchronous 4 KiB copy from memory LockHost locked: the plugin finds the
// agent pointer in its lock table (no hsa_amd_pointer_info call); run with
// FAKEHSA_COPY_DELAY_US=0 to see the plugin's cost rather than the fake's
// delay.
func BenchmarkCopyFromLocked(b *testing.B) {
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
	if _, err := d.LockHost(host, 1<<16); err != nil {
		b.Fatal(err)
	}
	defer d.UnlockHost(host)
	dev, err := d.Alloc(plugin.MemDevice, 4096)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Free(plugin.MemDevice, dev)
	for b.Loop() {
		if err := d.Copy(dev, host+4096, 4096, plugin.HostToDevice, nil); err != nil {
			b.Fatal(err)
		}
	}
}
