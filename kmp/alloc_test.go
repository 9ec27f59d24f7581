package kmp

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/ompglue"
	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/internal/warn"
)

func bytesAt(p unsafe.Pointer, n uintptr) []byte { return cmem.Bytes(uintptr(p), n) }

// captureWarnings runs f and returns what it warned.
func captureWarnings(t *testing.T, f func()) string {
	t.Helper()
	var buf bytes.Buffer
	defer warn.SetOutput(&buf)()
	f()
	return buf.String()
}

// omp_alloc: each predefined host allocator serves 1 KiB blocks, aligned and
// writable; omp_free with any handle releases them.
func TestOmpAlloc(t *testing.T) {
	for _, a := range []AllocatorHandle{NullAllocator, DefaultMemAlloc, LargeCapMemAlloc, ConstMemAlloc,
		HighBwMemAlloc, LowLatMemAlloc, CgroupMemAlloc, PteamMemAlloc, ThreadMemAlloc} {
		p := Alloc(1024, a)
		require.NotNil(t, p, "allocator %d", a)
		require.Zero(t, uintptr(p)%16)
		b := bytesAt(p, 1024)
		for i := range b {
			b[i] = byte(i)
		}
		Free(p, DefaultMemAlloc) // the handle passed does not matter
	}
	require.Nil(t, Alloc(0, DefaultMemAlloc), "size 0 gives NULL")
}

// omp_alloc_null_fb / omp_alloc_def_fb / omp_alloc_hbw.
func TestFallbacks(t *testing.T) {
	tests := []struct {
		name     string
		fallback uintptr
		second   bool
	}{{"null_fb", AtvNullFb, false}, {"default_mem_fb", AtvDefaultMemFb, true}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkPoolSize, 2 << 20}, {AtkFallback, tc.fallback}})
			require.NotEqual(t, NullAllocator, a)
			defer DestroyAllocator(a)
			p1 := Alloc(1<<20, a)
			require.NotNil(t, p1)
			var p2 unsafe.Pointer
			w := captureWarnings(t, func() { p2 = Alloc(1<<20, a) })
			require.Empty(t, w, "a fallback is not bad input")
			require.Equal(t, tc.second, p2 != nil)
			Free(p1, a)
			Free(p2, a)
		})
	}
	// high_bw memory space: backed by default memory on this host.
	hbw := InitAllocator(HighBwMemSpace, []AllocTrait{{AtkPoolSize, 2 << 20}, {AtkFallback, AtvNullFb}})
	require.NotEqual(t, NullAllocator, hbw)
	p := Alloc(1024, hbw)
	require.NotNil(t, p)
	Free(p, hbw)
	DestroyAllocator(hbw)
}

func TestInitAllocatorRejectsBadTraits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ms     MemspaceHandle
		traits []AllocTrait
		says   string
	}{
		{"bad alignment", DefaultMemSpace, []AllocTrait{{AtkAlignment, 3}}, "alignment"},
		{"unknown key", DefaultMemSpace, []AllocTrait{{TraitKey(42), 1}}, "42"},
		{"allocator_fb without fb_data", DefaultMemSpace, []AllocTrait{{AtkFallback, AtvAllocatorFb}}, "fb_data"},
		{"bad memspace", MemspaceHandle(7), nil, "memory space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a AllocatorHandle
			w := captureWarnings(t, func() { a = InitAllocator(tc.ms, tc.traits) })
			require.Equal(t, NullAllocator, a)
			require.Contains(t, w, "omp_init_allocator")
			require.Contains(t, w, tc.says)
			require.Equal(t, 1, strings.Count(w, "\n"), "one warning line")
		})
	}
}

// omp_calloc_def_fb / omp_calloc_size_0 / omp_aligned_calloc.
func TestCalloc(t *testing.T) {
	p := Calloc(64, 32, DefaultMemAlloc)
	require.NotNil(t, p)
	require.Equal(t, make([]byte, 2048), bytesAt(p, 2048))
	Free(p, DefaultMemAlloc)
	require.Nil(t, Calloc(0, 32, DefaultMemAlloc))
	require.Nil(t, Calloc(32, 0, DefaultMemAlloc))
	w := captureWarnings(t, func() { require.Nil(t, Calloc(^uintptr(0)/2, 4, DefaultMemAlloc)) })
	require.Contains(t, w, "overflow")

	a := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkAlignment, 64}})
	defer DestroyAllocator(a)
	for _, align := range []uintptr{1, 64, 128, 4096} {
		q := AlignedCalloc(align, 10, 100, a)
		require.NotNil(t, q)
		require.Zero(t, uintptr(q)%max(align, 64))
		require.Equal(t, make([]byte, 1000), bytesAt(q, 1000))
		Free(q, a)
	}
}

// omp_aligned_alloc: alignment = max(trait, argument).
func TestAlignedAlloc(t *testing.T) {
	a := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkAlignment, 128}})
	defer DestroyAllocator(a)
	for _, align := range []uintptr{8, 64, 256, 1 << 20} {
		p := AlignedAlloc(align, 1000, a)
		require.NotNil(t, p)
		require.Zero(t, uintptr(p)%max(align, 128))
		Free(p, NullAllocator)
	}
	w := captureWarnings(t, func() { require.Nil(t, AlignedAlloc(96, 10, a)) })
	require.Contains(t, w, "power of two")
}

// omp_realloc_def_fb / omp_realloc_null_ptr / omp_realloc_size_0.
func TestRealloc(t *testing.T) {
	a := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkPoolSize, 1 << 20}, {AtkFallback, AtvDefaultMemFb}})
	defer DestroyAllocator(a)
	p := Realloc(nil, 100, a, NullAllocator)
	require.NotNil(t, p)
	copy(bytesAt(p, 100), bytes.Repeat([]byte{3}, 100))
	q := Realloc(p, 2<<20, a, a) // over the pool: the default allocator takes it
	require.NotNil(t, q)
	require.Equal(t, bytes.Repeat([]byte{3}, 100), bytesAt(q, 100))
	r := Realloc(q, 50, NullAllocator, NullAllocator)
	require.NotNil(t, r)
	require.Equal(t, bytes.Repeat([]byte{3}, 50), bytesAt(r, 50))
	require.Nil(t, Realloc(r, 0, a, a))

	null := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkPoolSize, 4096}, {AtkFallback, AtvNullFb}})
	defer DestroyAllocator(null)
	s := Alloc(1000, null)
	require.NotNil(t, s)
	bytesAt(s, 1)[0] = 42
	require.Nil(t, Realloc(s, 1<<20, null, null), "does not fit: NULL")
	require.Equal(t, byte(42), bytesAt(s, 1)[0], "old block intact")
	Free(s, null)
}

func TestBadInputWarnsOnce(t *testing.T) {
	p := Alloc(64, DefaultMemAlloc)
	Free(p, DefaultMemAlloc)
	var x [16]byte
	for _, tc := range []struct {
		name string
		f    func()
		says string
	}{
		{"double free", func() { Free(p, DefaultMemAlloc) }, "already freed"},
		{"foreign", func() { Free(unsafe.Pointer(&x[0]), DefaultMemAlloc) }, "not allocated by this runtime"},
		{"bad handle", func() { require.Nil(t, Alloc(8, AllocatorHandle(12345))) }, "not a live allocator"},
		{"destroy bad handle", func() { DestroyAllocator(AllocatorHandle(12345)) }, "omp_destroy_allocator"},
		{"free nil", func() { Free(nil, DefaultMemAlloc) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := captureWarnings(t, tc.f)
			if tc.says == "" {
				require.Empty(t, w)
				return
			}
			require.Contains(t, w, tc.says)
			require.Equal(t, 1, strings.Count(w, "\n"))
		})
	}
}

func TestDestroyWithLiveBlocksWarns(t *testing.T) {
	a := InitAllocator(DefaultMemSpace, nil)
	p := Alloc(100, a)
	w := captureWarnings(t, func() { DestroyAllocator(a) })
	require.Contains(t, w, "1 block (100 bytes) still allocated")
	require.Equal(t, 1, strings.Count(w, "\n"), "one report, not one from alloc and one from kmp")
	bytesAt(p, 100)[99] = 1 // still valid
	Free(p, NullAllocator)
}

// Tests that change process-wide state run in a child process.
func runChild(t *testing.T, name string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), append(env, "OMPALLOC_KMP_CHILD="+name)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

func TestChild(t *testing.T) {
	switch os.Getenv("OMPALLOC_KMP_CHILD") {
	case "":
		t.Skip("run by other tests in a child process")
	case "default-allocator":
		require.Equal(t, DefaultMemAlloc, GetDefaultAllocator())
		a := InitAllocator(DefaultMemSpace, []AllocTrait{{AtkAlignment, 256}})
		SetDefaultAllocator(a)
		require.Equal(t, a, GetDefaultAllocator())
		p := Alloc(10, NullAllocator) // the null allocator means the default one
		require.Zero(t, uintptr(p)%256)
		Free(p, NullAllocator)
		SetDefaultAllocator(NullAllocator)
		require.Equal(t, DefaultMemAlloc, GetDefaultAllocator())
	case "foreign-memcpy":
		foreignMemcpyChild(t)
	case "env":
		os.Stdout.WriteString("default=" + itoa(uintptr(GetDefaultAllocator())) + "\n")
		p := Alloc(10, NullAllocator)
		os.Stdout.WriteString("aligned64=" + itoa(uintptr(p)%64) + "\n")
	}
}

func itoa(v uintptr) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

func TestDefaultAllocator(t *testing.T) { runChild(t, "default-allocator") }

// The OMP_ALLOCATOR env tests of LLVM and libgomp.
func TestOMPAllocatorEnv(t *testing.T) {
	for _, tc := range []struct {
		value, want, warn string
	}{
		{"omp_large_cap_mem_alloc", "default=2", ""},
		{"omp_high_bw_mem_space", "default=4", ""},
		{"omp_default_mem_space:alignment=64,pool_size=1048576", "aligned64=0", ""},
		{"omp_default_mem_space:alignment=63", "default=1", "OMP_ALLOCATOR"},
		{"no_such_allocator", "default=1", "OMP_ALLOCATOR"},
		{"omp_default_mem_space:bogus=1", "default=1", "bogus"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			out := runChild(t, "env", "OMP_ALLOCATOR="+tc.value)
			require.Contains(t, out, tc.want)
			if tc.warn == "" {
				require.NotContains(t, out, "warning")
			} else {
				require.Contains(t, out, tc.warn)
				require.Equal(t, 1, strings.Count(out, "warning"))
			}
		})
	}
}

// Issue 23 item 4: a handle kept past omp_destroy_allocator allocated from
// whichever allocator got its number next; it is refused with one warning
// now, and the allocator made after it is untouched.
func TestStaleHandleRefusedWithWarning(t *testing.T) {
	stale := InitAllocator(DefaultMemSpace, nil)
	require.NotEqual(t, NullAllocator, stale)
	DestroyAllocator(stale)
	fresh := InitAllocator(DefaultMemSpace, nil)
	require.NotEqual(t, NullAllocator, fresh)
	t.Cleanup(func() { DestroyAllocator(fresh) })
	require.NotEqual(t, stale, fresh)
	var p unsafe.Pointer
	w := captureWarnings(t, func() { p = Alloc(100, stale) })
	require.Nil(t, p, "a stale handle allocates nothing")
	require.Equal(t, 1, strings.Count(w, "\n"), "one warning: %q", w)
	require.Contains(t, w, "not a live allocator")
	a, ok := ompglue.Lookup(uintptr(fresh))
	require.True(t, ok)
	require.Zero(t, a.Stats().Allocs, "the allocator made after it served nothing")
}

// An allocator made here is an alloc.Allocator too: its statistics count
// what kmp allocated and freed through its handle.
func TestInitAllocatorStats(t *testing.T) {
	h := InitAllocator(DefaultMemSpace, []AllocTrait{{Key: AtkPoolSize, Value: 1 << 20}})
	defer DestroyAllocator(h)
	p := Alloc(1000, h)
	q := Alloc(3000, h)
	a, ok := ompglue.Lookup(uintptr(h))
	require.True(t, ok)
	st := a.Stats()
	require.Equal(t, []any{int64(2), int64(4000), uintptr(1 << 20)}, []any{st.BlocksLive, st.BytesLive, st.PoolSize})
	Free(p, h)
	Free(q, h)
	require.Zero(t, a.Stats().BlocksLive)
}

// kmp spells omp.h's allocator numbers out (go doc shows them); they are
// internal/predef's, the table alloc makes its allocators from.
func TestPredefinedHandlesAreThePredefTable(t *testing.T) {
	for h, want := range map[AllocatorHandle]uintptr{
		NullAllocator: predef.Null, DefaultMemAlloc: predef.DefaultMem, LargeCapMemAlloc: predef.LargeCapMem,
		ConstMemAlloc: predef.ConstMem, HighBwMemAlloc: predef.HighBwMem, LowLatMemAlloc: predef.LowLatMem,
		CgroupMemAlloc: predef.CgroupMem, PteamMemAlloc: predef.PteamMem, ThreadMemAlloc: predef.ThreadMem,
		TargetHostMemAlloc: predef.TargetHostMem, TargetSharedMemAlloc: predef.TargetSharedMem,
		TargetDeviceMemAlloc: predef.TargetDeviceMem,
	} {
		require.Equal(t, want, uintptr(h))
	}
	require.Len(t, predef.Handles(), 11, "every predefined allocator has its kmp constant")
}
