package dl

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dlcall"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
)

const missingLib = "/nonexistent/libompalloc-missing.so.1"

func TestOpenTriesCandidatesInOrder(t *testing.T) {
	lib, err := Open(Spec{Name: "libc", Candidates: []string{missingLib, libcPath, missingLib}})
	require.NoError(t, err)
	require.Equal(t, libcPath, lib.Path, "the first candidate that loads")
	require.Equal(t, "libc", lib.Name)
}

func TestOpenNotFoundListsEveryCandidate(t *testing.T) {
	_, err := Open(Spec{Name: "Test driver", Candidates: []string{missingLib, "libompalloc-nope.so"}})
	require.ErrorIs(t, err, ErrNotFound)
	require.NotErrorIs(t, err, ErrDisabled)
	for _, s := range []string{"Test driver", missingLib, "libompalloc-nope.so"} {
		require.Contains(t, err.Error(), s)
	}
	_, err = Open(Spec{Name: "nothing"})
	require.ErrorIs(t, err, ErrNotFound, "no candidates at all")
}

func TestOpenEnvOverride(t *testing.T) {
	const other = "/nonexistent/libompalloc-other.so"
	spec := Spec{Name: "libc", Candidates: []string{missingLib}, EnvPath: "OMPALLOC_TEST_LIB_PATH"}
	for _, tc := range []struct {
		name, value string
		wantPath    string // "" = not found
		tried       string // the candidate the error names
	}{
		{"unset uses the candidates", "", "", missingLib},
		{"set is the only candidate", other, "", other},
		{"set to a library", libcPath, libcPath, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(spec.EnvPath, tc.value)
			lib, err := Open(spec)
			if tc.wantPath == "" {
				require.ErrorIs(t, err, ErrNotFound)
				require.Contains(t, err.Error(), tc.tried)
				if tc.tried != missingLib {
					require.NotContains(t, err.Error(), missingLib, "the candidates were not tried")
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantPath, lib.Path)
		})
	}
}

func TestOpenDisable(t *testing.T) {
	spec := Spec{Name: "libc", Candidates: []string{libcPath}, EnvDisable: "OMPALLOC_TEST_LIB_OFF"}
	for _, v := range []string{"1", "true", "TRUE", "yes", " on "} {
		t.Setenv(spec.EnvDisable, v)
		_, err := Open(spec)
		require.ErrorIs(t, err, ErrDisabled, "value %q", v)
		require.NotErrorIs(t, err, ErrNotFound)
		require.Contains(t, err.Error(), spec.EnvDisable)
	}
	for _, v := range []string{"", "0", "false", "no", "off", "maybe"} {
		t.Setenv(spec.EnvDisable, v)
		_, err := Open(spec)
		require.NoError(t, err, "value %q does not disable", v)
	}
}

func TestSym(t *testing.T) {
	lib, err := Open(Spec{Name: "libc", Candidates: []string{libcPath}})
	require.NoError(t, err)
	p, err := lib.Sym("getpid")
	require.NoError(t, err)
	require.NotZero(t, p)
	require.Equal(t, uintptr(os.Getpid()), dlcall.Call(p), "Call runs the function")

	_, err = lib.Sym("ompalloc_no_such_symbol")
	require.ErrorIs(t, err, ErrSymbolMissing)
	// Issue 22: the lookup first, then the cause (was "symbol missing:
	// ompalloc_no_such_symbol in ...").
	require.Equal(t, "ompalloc_no_such_symbol in "+libcPath+": "+ErrSymbolMissing.Error(), err.Error())
}

func TestBindRequiredOptional(t *testing.T) {
	lib, err := Open(Spec{Name: "libc", Candidates: []string{libcPath}})
	require.NoError(t, err)
	getpid, _ := lib.Sym("getpid")
	var a, b, c uintptr = 0, 0, 123 // c's stale value must be cleared
	require.NoError(t, lib.Bind([]Symbol{
		{Name: "getpid", Addr: &a},
		{Name: "getpid", Addr: &b, Versions: []string{"_ompalloc_v9"}}, // absent version: base name
		{Name: "ompalloc_optional", Addr: &c, Optional: true},
	}))
	require.Equal(t, getpid, a)
	require.Equal(t, getpid, b)
	require.Zero(t, c)

	var x, y, z uintptr
	err = lib.Bind([]Symbol{
		{Name: "ompalloc_missing_one", Addr: &x},
		{Name: "getpid", Addr: &y},
		{Name: "ompalloc_missing_two", Addr: &z, Versions: []string{"_v2"}},
	})
	require.ErrorIs(t, err, ErrSymbolMissing)
	for _, s := range []string{"ompalloc_missing_one", "ompalloc_missing_two", libcPath} {
		require.Contains(t, err.Error(), s, "the error names every missing symbol and the library")
	}
	require.True(t, strings.HasSuffix(err.Error(), ": "+ErrSymbolMissing.Error()), "the cause last: %s", err)
	require.Equal(t, getpid, y, "present symbols are bound even when others are missing")
}

// Versioned names win over the base name when both exist (the CUDA driver
// exports cuMemAlloc and cuMemAlloc_v2 with different ABIs).
func TestBindPrefersVersions(t *testing.T) {
	path := fakedrv.Build(t, "fakecuda")
	lib, err := Open(Spec{Name: "fake CUDA driver", Candidates: []string{path}})
	require.NoError(t, err)
	v1, err := lib.Sym("cuMemAlloc")
	require.NoError(t, err)
	v2, err := lib.Sym("cuMemAlloc_v2")
	require.NoError(t, err)
	require.NotEqual(t, v1, v2)
	var a, b uintptr
	require.NoError(t, lib.Bind([]Symbol{
		{Name: "cuMemAlloc", Addr: &a, Versions: []string{"_v3", "_v2"}},
		{Name: "cuMemAlloc", Addr: &b},
	}))
	require.Equal(t, v2, a, "the first version present")
	require.Equal(t, v1, b)
}

func TestLazyOpensOnceAndCachesAbsence(t *testing.T) {
	const env = "OMPALLOC_TEST_LAZY_PATH"
	t.Setenv(env, missingLib)
	z := &Lazy{Spec: Spec{Name: "lazy", Candidates: []string{libcPath}, EnvPath: env}}
	_, err := z.Get()
	require.ErrorIs(t, err, ErrNotFound)
	t.Setenv(env, "")
	_, err2 := z.Get()
	require.Same(t, err, err2, "absence is cached: the library is not looked for again")

	z = &Lazy{Spec: Spec{Name: "lazy", Candidates: []string{libcPath}}}
	var wg sync.WaitGroup
	libs := make([]*Library, 8)
	for i := range libs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			libs[i], _ = z.Get()
		}(i)
	}
	wg.Wait()
	require.NotNil(t, libs[0])
	for _, l := range libs {
		require.Same(t, libs[0], l, "one Library for every caller")
	}
}

func TestLazyDisabled(t *testing.T) {
	t.Setenv("OMPALLOC_TEST_LAZY_OFF", "1")
	z := &Lazy{Spec: Spec{Name: "lazy", Candidates: []string{libcPath}, EnvDisable: "OMPALLOC_TEST_LAZY_OFF"}}
	lib, err := z.Get()
	require.Nil(t, lib)
	require.True(t, errors.Is(err, ErrDisabled))
	require.True(t, strings.HasPrefix(err.Error(), "lazy: "), "the error starts with the library's name: %q", err)
}

// Call passes pointer arguments through: strlen reads a C string.
func TestCallPointerArgument(t *testing.T) {
	lib, err := Open(Spec{Name: "libc", Candidates: []string{libcPath}})
	require.NoError(t, err)
	strlen, err := lib.Sym("strlen")
	require.NoError(t, err)
	c, err := C()
	require.NoError(t, err)
	p, err := c.Map(4096)
	require.NoError(t, err)
	defer c.Unmap(p, 4096)
	copy(cmem.Bytes(p, 6), "hello\x00")
	require.Equal(t, uintptr(5), dlcall.Call(strlen, p))
}
