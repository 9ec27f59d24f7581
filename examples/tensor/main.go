// Tensor shows what a Go tensor library does with ompalloc: typed slices
// (alloc.Make[float32]) from a pinned allocator, copied to the default
// device and back, with a small parameter block staged through the
// device's pinned staging pool, and everything released at the end.
//
//	go run ./examples/tensor
//
// Without a GPU the default device is the host, and the copies are
// memmoves; the code is the same.
package main

import (
	"fmt"
	"log"
	"unsafe"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
	"github.com/ompalloc/ompalloc/target/plugin"
	"github.com/ompalloc/ompalloc/traits"
)

// Tensor is a dense float32 tensor whose data is not Go heap memory.
type Tensor struct {
	Shape []int
	Data  []float32
	a     alloc.Interface // a tensor library can hold any allocator
}

func NewTensor(a alloc.Interface, shape ...int) (*Tensor, error) {
	n := 1
	for _, s := range shape {
		n *= s
	}
	data, err := alloc.Make[float32](a, n) // zeroed, len == cap == n
	if err != nil {
		return nil, err
	}
	return &Tensor{Shape: shape, Data: data, a: a}, nil
}

func (t *Tensor) Bytes() uintptr { return uintptr(len(t.Data)) * 4 }
func (t *Tensor) Addr() uintptr  { return uintptr(unsafe.Pointer(unsafe.SliceData(t.Data))) }
func (t *Tensor) Release() error { return alloc.FreeSlice(t.a, t.Data) }

func main() {
	// Pinned, 64-byte aligned; if pinning is refused, plain memory still works.
	pinnedMem, err := alloc.New(memspace.Default,
		alloc.WithPinned(true), alloc.WithAlignment(64), alloc.WithFallback(traits.DefaultMemFb))
	if err != nil {
		log.Fatal(err)
	}
	x, err := NewTensor(pinnedMem, 256, 256)
	if err != nil {
		log.Fatal(err)
	}
	for i := range x.Data {
		x.Data[i] = float32(i) * 0.5
	}

	d, err := target.Get(target.DefaultDevice())
	if err != nil {
		log.Fatal(err)
	}
	if d.IsHost() {
		fmt.Println("no accelerator: the host device stands in")
	}
	fmt.Printf("device: %v\n", d)

	devX, err := d.Alloc(plugin.MemDevice, x.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	devParams, err := d.Alloc(plugin.MemDevice, 64)
	if err != nil {
		log.Fatal(err)
	}
	q, err := d.NewQueue()
	if err != nil {
		log.Fatal(err)
	}

	// The tensor's memory is in the device's registry: one DMA from it.
	if err := d.Submit(devX, x.Addr(), x.Bytes(), q); err != nil {
		log.Fatal(err)
	}
	// A small block from pageable memory is staged: copied into a pinned
	// buffer at once, so it may be reused as soon as Submit returns.
	plain, _ := alloc.Lookup(alloc.DefaultMem)
	params, err := alloc.Make[int32](plain, 16)
	if err != nil {
		log.Fatal(err)
	}
	params[0], params[1] = 256, 256
	if err := d.Submit(devParams, uintptr(unsafe.Pointer(&params[0])), 64, q); err != nil {
		log.Fatal(err)
	}
	params[0] = -1 // safe: the staged copy no longer reads it
	if err := q.Synchronize(); err != nil {
		log.Fatal(err)
	}
	if st := d.StagingStats(); !d.IsHost() {
		fmt.Printf("staging pool: %d hits, %d misses, %d buffers\n", st.Hits, st.Misses, st.Buffers)
	} else {
		fmt.Println("staging pool: not used (the host device copies at once)")
	}

	// Back to a second pinned tensor, and compare.
	y, err := NewTensor(pinnedMem, 256, 256)
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Retrieve(y.Addr(), devX, y.Bytes(), nil); err != nil {
		log.Fatal(err)
	}
	for i := range y.Data {
		if y.Data[i] != x.Data[i] {
			log.Fatalf("element %d: got %v, want %v", i, y.Data[i], x.Data[i])
		}
	}
	fmt.Printf("verified %d floats (%d bytes) after the round trip\n", len(y.Data), y.Bytes())

	// Clean release: queue, device memory, tensors, allocator.
	for _, err := range []error{q.Close(), d.Free(plugin.MemDevice, devX), d.Free(plugin.MemDevice, devParams),
		x.Release(), y.Release(), alloc.FreeSlice(plain, params)} {
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("live blocks after release: %d\n", pinnedMem.Stats().BlocksLive)
	if err := pinnedMem.Destroy(); err != nil {
		log.Fatal(err)
	}
}
