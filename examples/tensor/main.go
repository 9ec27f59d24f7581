// Tensor shows what a Go tensor library does with ompalloc: typed slices
// (alloc.Make[float32]) from a pinned allocator, copied to the default
// device and back with typed copies (no uintptr, no unsafe), a Go slice the
// program already has pinned in place (target.Pin) and sent on a queue, and
// everything released at the end.
//
//	go run ./examples/tensor
//
// Without a GPU the default device is the host, and the copies are
// memmoves; the code is the same.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/target"
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

	devX, err := target.AllocArray[float32](d, target.MemDevice, len(x.Data))
	if err != nil {
		log.Fatal(err)
	}
	devParams, err := target.AllocArray[int32](d, target.MemDevice, 16)
	if err != nil {
		log.Fatal(err)
	}
	q, err := d.NewQueue()
	if err != nil {
		log.Fatal(err)
	}

	// The tensor's memory is in the device's registry: one DMA from it.
	if err := target.CopyToDevice(devX, x.Data, q); err != nil {
		log.Fatal(err)
	}
	// A parameter block the program already has, in ordinary Go memory:
	// pin it in place, copy it on the queue, unpin after the queue is done.
	params := make([]int32, 16)
	params[0], params[1] = 256, 256
	pin, err := target.Pin(params, d.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("params pinned: %v\n", target.IsPinned(params))
	if err := target.CopyToDevice(devParams, params, q); err != nil {
		log.Fatal(err)
	}
	if err := q.Synchronize(context.Background()); err != nil {
		log.Fatal(err)
	}
	if err := pin.Unpin(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("params pinned after Unpin: %v\n", target.IsPinned(params))

	// Back to a second pinned tensor, and compare.
	y, err := NewTensor(pinnedMem, 256, 256)
	if err != nil {
		log.Fatal(err)
	}
	if err := target.CopyFromDevice(y.Data, devX, nil); err != nil {
		log.Fatal(err)
	}
	for i := range y.Data {
		if y.Data[i] != x.Data[i] {
			log.Fatalf("element %d: got %v, want %v", i, y.Data[i], x.Data[i])
		}
	}
	back := make([]int32, 16)
	if err := target.CopyFromDevice(back, devParams, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("verified %d floats (%d bytes) after the round trip; params %v\n", len(y.Data), 4*len(y.Data), back[:2])

	// Clean release: queue, device memory, tensors, allocator.
	for _, err := range []error{q.Close(), devX.Free(), devParams.Free(), x.Release(), y.Release()} {
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("live blocks after release: %d\n", pinnedMem.Stats().BlocksLive)
	if err := pinnedMem.Destroy(); err != nil {
		log.Fatal(err)
	}
}
