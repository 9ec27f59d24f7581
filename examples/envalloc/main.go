// Envalloc shows OMP_ALLOCATOR choosing the default allocator: a predefined
// allocator's name, a memory space, or a memory space with traits. A bad
// value gives one warning naming OMP_ALLOCATOR, and the default stays
// omp_default_mem_alloc.
//
//	go run ./examples/envalloc
//
// The variable is read once, at first use, so the program runs itself again
// with each value and prints what the child got.
package main

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/kmp"
)

const childVar = "ENVALLOC_CHILD"

var values = []string{
	"", // unset: omp_default_mem_alloc
	"omp_large_cap_mem_alloc",
	"omp_high_bw_mem_space",
	"omp_default_mem_space:alignment=64,pool_size=1048576,fallback=null_fb",
	"omp_default_mem_space:pinned=true",
	"omp_default_mem_space:alignment=3", // not a power of two: warning
	"no_such_allocator",                 // warning
}

func main() {
	if os.Getenv(childVar) == "1" {
		report()
		return
	}
	exe, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range values {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), childVar+"=1", "OMP_ALLOCATOR="+v)
		out, err := cmd.CombinedOutput() // the child's warning, if any, included
		if err != nil {
			log.Fatalf("OMP_ALLOCATOR=%q: %v\n%s", v, err, out)
		}
		fmt.Printf("OMP_ALLOCATOR=%q\n", v)
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fmt.Println("   ", line)
		}
	}
}

// report prints the default allocator this process got.
func report() {
	a := alloc.Default()
	fmt.Printf("default allocator: %v (handle %d), memory space %v, traits %v\n",
		a, kmp.GetDefaultAllocator(), a.Memspace(), a.Traits())
	// omp_null_allocator means "the default allocator".
	p := kmp.Alloc(100, kmp.NullAllocator)
	if info, err := alloc.Inspect(p); err == nil {
		fmt.Printf("omp_alloc(100, omp_null_allocator) came from %v\n", info.Allocator)
	}
	kmp.Free(p, kmp.NullAllocator)
}
