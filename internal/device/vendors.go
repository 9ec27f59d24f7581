package device

import (
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/plugin/amdgpu"
	"github.com/ompalloc/ompalloc/internal/plugin/cuda"
)

// Vendor is one accelerator plugin as discovery knows it.
type Vendor struct {
	Name string               // the plugin's name: "cuda"
	New  func() plugin.Plugin // builds the plugin; discovery calls Init
}

// vendors are the accelerator plugins, in numbering order: their devices
// are 0..n-1, CUDA's first. The host comes after them all. Adding a vendor
// is one line here (see ARCHITECTURE.md, "Adding a vendor").
var vendors = []Vendor{
	{"cuda", cuda.New},
	{"amdgpu", amdgpu.New},
}

// vendorList is the list discovery uses (under worldMu).
func vendorList() []Vendor { return vendors }

// ReplaceVendors makes the next discoveries use vs instead of the
// registered vendors, for tests with fake plugins (call Shutdown first);
// restore puts the registered ones back.
func ReplaceVendors(vs []Vendor) (restore func()) {
	worldMu.Lock()
	saved := vendors
	vendors = append([]Vendor(nil), vs...)
	worldMu.Unlock()
	return func() {
		worldMu.Lock()
		vendors = saved
		worldMu.Unlock()
	}
}
