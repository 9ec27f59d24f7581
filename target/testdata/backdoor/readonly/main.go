// What an outside program may do with a device's registry: read it. This
// one must compile, so that the refusals of the others are the back door's
// and not the test's set-up.
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
	d.Registry().Each(func(e pinned.EntryInfo) bool {
		fmt.Println(e.Kind, uintptr(p) >= e.Host && uintptr(p) < e.Host+e.Size)
		return true
	})
	e, ok := d.Registry().Entry(uintptr(p))
	owner, held := d.Registry().Held(e.Host)
	fmt.Println(ok, owner, held, d.Registry().Stats().Entries, d.Registry().Stats().HeldBytes)
}
