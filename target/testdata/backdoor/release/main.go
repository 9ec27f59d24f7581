// The back door of issue 28, as an outside program wrote it: find the chunk
// a pinned allocator holds and release it through the device's registry,
// so that the kernel unlocks memory the allocator still counts as pinned.
// It must not compile.
package main

import (
	"fmt"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/pinned"
	"github.com/ompalloc/ompalloc/target"
)

func main() {
	a, _ := alloc.New(memspace.Default, alloc.WithPinned(true))
	p, _ := a.Alloc(1000)
	d, _ := target.Get(target.InitialDevice())
	var host uintptr
	d.Registry().Each(func(e pinned.EntryInfo) bool {
		host = e.Host
		return uintptr(p) < e.Host || uintptr(p) >= e.Host+e.Size
	})
	fmt.Println(d.Registry().Release(host))
}
