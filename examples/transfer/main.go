// Transfer copies a buffer host → device → host on the default device and
// checks every byte: first with the omp.h-style kmp.TargetMemcpy (0 means
// success), then with target.Memcpy, which returns errors.
//
//	go run ./examples/transfer
//
// Without a GPU the default device is the host (device 0, the initial
// device), and the same calls copy host memory.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"time"
	"unsafe"

	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/target"
)

func main() {
	host, dev := kmp.GetInitialDevice(), kmp.GetDefaultDevice()
	fmt.Printf("%d accelerator(s); default device %d, host (initial device) %d\n", kmp.GetNumDevices(), dev, host)

	const n = 8 << 20
	src := kmp.Alloc(n, kmp.DefaultMemAlloc)
	dst := kmp.Calloc(n, 1, kmp.DefaultMemAlloc)
	devBuf := kmp.TargetAlloc(n, dev) // device memory (host memory on the host device)
	if src == nil || dst == nil || devBuf == nil {
		log.Fatal("allocation failed")
	}
	in, out := unsafe.Slice((*byte)(src), n), unsafe.Slice((*byte)(dst), n)
	for i := range in {
		in[i] = byte(i * 7)
	}

	// Time two round trips: the first one also faults in the pages of the
	// buffers it writes for the first time (devBuf, and dst: calloc'ed
	// memory fresh from the system is not touched until written), which on
	// the host costs more than the copy; the second one is the copies alone.
	roundTrip := func() time.Duration {
		clear(out[:1])
		start := time.Now()
		if rc := kmp.TargetMemcpy(devBuf, src, n, 0, 0, dev, host); rc != 0 {
			log.Fatalf("host to device: %d", rc)
		}
		if rc := kmp.TargetMemcpy(dst, devBuf, n, 0, 0, host, dev); rc != 0 {
			log.Fatalf("device to host: %d", rc)
		}
		el := time.Since(start)
		if !bytes.Equal(in, out) {
			log.Fatal("round trip corrupted the data")
		}
		return el
	}
	first, second := roundTrip(), roundTrip()
	fmt.Printf("round trip ok: %d MiB there and back\n", n>>20)
	fmt.Printf("  first, with first touch of the destination pages: %v\n", first.Round(time.Microsecond))
	fmt.Printf("  second, copies only: %v (%.1f GB/s over the %d MiB moved)\n", second.Round(time.Microsecond),
		2*float64(n)/second.Seconds()/1e9, 2*n>>20)

	// The Go API: the same copy with offsets, and errors instead of -1.
	clear(out)
	if err := target.Memcpy(uintptr(devBuf)+4096, uintptr(src), 4096, dev, host); err != nil {
		log.Fatal(err)
	}
	if err := target.Memcpy(uintptr(dst), uintptr(devBuf)+4096, 4096, host, dev); err != nil {
		log.Fatal(err)
	}
	fmt.Println("offset copy ok:", bytes.Equal(in[:4096], out[:4096]))

	err := target.Memcpy(uintptr(devBuf), uintptr(src), 16, 42, host)
	fmt.Println("bad device:", err)
	fmt.Println("  errors.Is(err, target.ErrBadDevice):", errors.Is(err, target.ErrBadDevice))

	kmp.TargetFree(devBuf, dev)
	kmp.Free(src, kmp.DefaultMemAlloc)
	kmp.Free(dst, kmp.DefaultMemAlloc)
}
