package reliability

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/kmp"
)

// malformedAllocatorEnv are OMP_ALLOCATOR values that must each give one
// warning naming OMP_ALLOCATOR and leave omp_default_mem_alloc the default.
var malformedAllocatorEnv = []string{
	"bogus",
	"omp_no_such_mem_alloc",
	"omp_default_mem_space:",
	"omp_default_mem_space:alignment",
	"omp_default_mem_space:alignment=",
	"omp_default_mem_space:alignment=3",
	"omp_default_mem_space:alignment=-64",
	"omp_default_mem_space:alignment=99999999999999999999999",
	"omp_default_mem_space:pool_size=0",
	"omp_default_mem_space:pool_size=abc",
	"omp_default_mem_space:fallback=sometimes",
	"omp_default_mem_space:fallback=allocator_fb",
	"omp_default_mem_space:fb_data=omp_no_such_alloc,fallback=allocator_fb",
	"omp_default_mem_space:pinned=maybe",
	"omp_default_mem_space:partition=everywhere",
	"omp_default_mem_space:sync_hint=contended,bogus=1",
	"omp_default_mem_space:device_access=all",
	"omp_default_mem_space:alignment=64,,pinned=true",
	"omp_default_mem_space,alignment=64",
	":alignment=64",
	":::",
	"omp_default_mem_space:alignment=64:pinned=true",
	"omp_default_mem_space:=64",
	"omp_high_bw_mem_space:access=galaxy",
	"omp_default_mem_space:alignment=64" + strings.Repeat(",sync_hint=contended", 1000) + ",x=1",
	"omp_default_mem_alloc:alignment=64",
	"\xff\xfe\x01",
}

// Malformed OMP_ALLOCATOR values, each in its own process (it is read once,
// at first use): one warning naming OMP_ALLOCATOR, the default allocator
// stays omp_default_mem_alloc, allocation works, nothing exits or panics.
func TestMalformedOMPAllocator(t *testing.T) {
	for i, v := range malformedAllocatorEnv {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel() // each child starts a process: under -race that takes a while
			out := runChild(t, "TestMalformedOMPAllocatorChild", "OMP_ALLOCATOR="+v)
			require.Contains(t, out, "default=1\n")
			require.Equal(t, 1, strings.Count(out, "warning"), "%q:\n%s", v, out)
			require.Contains(t, out, "OMP_ALLOCATOR")
		})
	}
}

func TestMalformedOMPAllocatorChild(t *testing.T) {
	inChild(t)
	h := kmp.GetDefaultAllocator()
	fmt.Printf("default=%d\n", h)
	p := kmp.Alloc(100, kmp.NullAllocator)
	require.NotNil(t, p)
	kmp.Free(p, kmp.NullAllocator)
	_ = os.Stdout.Sync()
}
