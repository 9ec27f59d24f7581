package alloc_test

import (
	"context"
	"fmt"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
)

// FreeAfter is the stream-ordered free: the block goes back to its
// allocator once the work issued on the queue so far has completed.
func ExampleFreeAfter() {
	d, err := target.Get(target.InitialDevice())
	if err != nil {
		fmt.Println(err)
		return
	}
	q, err := d.NewQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Close()
	a, err := alloc.New(memspace.Default)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Destroy()
	p, err := a.Alloc(4096)
	if err != nil {
		fmt.Println(err)
		return
	}
	// ... work on q reads p ...
	if err := alloc.FreeAfter(p, q); err != nil {
		fmt.Println(err)
		return
	}
	if err := q.Synchronize(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("live blocks:", a.Stats().BlocksLive)
	// Output: live blocks: 0
}
