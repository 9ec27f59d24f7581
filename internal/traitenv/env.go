// Package traitenv parses OMP_ALLOCATOR (OpenMP 5.1 syntax) into the
// allocator or the memory space and traits it asks for. Package alloc reads
// the variable at first use; ompalloc info explains it.
package traitenv

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ompalloc/ompalloc/internal/ascii"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// ErrInvalidEnv is wrapped by every error ParseEnv returns.
var ErrInvalidEnv = errors.New("invalid " + envvar.Allocator)

// EnvError reports a bad OMP_ALLOCATOR value. It unwraps to ErrInvalidEnv
// and, when a trait value was at fault, to the *traits.TraitError as well (so
// errors.Is(err, traits.ErrInvalidTrait) holds for those).
type EnvError struct {
	Value  string // the whole value, as given
	Reason string // what was wrong, naming the bad name, key or value
	Err    error  // the underlying *traits.TraitError, or nil
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("%s=%q: %s", envvar.Allocator, e.Value, e.Reason)
}

func (e *EnvError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidEnv, e.Err}
	}
	return []error{ErrInvalidEnv}
}

// EnvSpec is what an OMP_ALLOCATOR value asks for.
type EnvSpec struct {
	// Allocator is the predefined allocator to use, when the value names one
	// or is a bare memory space (which maps to that memory space's predefined
	// allocator, as in libgomp). 0 when Traits ask for a new allocator.
	Allocator uintptr
	// Memspace is always set: the memory space named, or the one the
	// predefined allocator draws from.
	Memspace memspace.ID
	// Traits, in the order given, for a new allocator on Memspace; nil
	// when Allocator is set.
	Traits []traits.Trait
}

// envKeys are the keys OpenMP 5.1 allows in OMP_ALLOCATOR.
var envKeys = []traits.Key{traits.SyncHint, traits.Alignment, traits.Access, traits.PoolSize, traits.Fallback, traits.FbData, traits.Pinned, traits.Partition}

func isEnvKey(k traits.Key) bool {
	for _, e := range envKeys {
		if e == k {
			return true
		}
	}
	return false
}

// ParseEnv parses an OMP_ALLOCATOR value (OpenMP 5.1):
//
//	<predefined allocator> | <memory space> | <memory space>:<key>=<value>[,<key>=<value>...]
//
// Names and values are compared ignoring case and surrounding white space,
// as OpenMP specifies for environment variables. The keys are sync_hint,
// alignment, access, pool_size, fallback, fb_data, pinned and partition;
// alignment and pool_size take plain decimal numbers of bytes below 2^64-1
// (no sign, no suffix such as K or M: neither LLVM nor libgomp accepts one),
// every key takes "default" (omp_atv_default: the key's default), fb_data takes
// a predefined allocator name, pinned takes true or false, the others take
// value names (fallback=null_fb, access=all, sync_hint=contended,
// partition=blocked). A key given twice: the last wins, as in traits.FromList.
//
// Unlike LLVM, which skips a bad trait with a warning and keeps the others,
// any fault rejects the whole value: the caller then warns once and keeps
// omp_default_mem_alloc. Numeric allocator handles ("3") are not accepted.
// The traits are validated with traits.FromList, so alignment=3 or
// fallback=allocator_fb without fb_data are errors here; whether the memory
// space can serve the allocator is left to package alloc.
func ParseEnv(value string) (EnvSpec, error) {
	fail := func(err error, format string, args ...any) (EnvSpec, error) {
		return EnvSpec{}, &EnvError{Value: value, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	s := strings.TrimSpace(value)
	if s == "" {
		return fail(nil, "empty value")
	}
	head, rest, hasTraits := strings.Cut(s, ":")
	head = strings.TrimSpace(head)
	name := ascii.Lower(head)
	if !hasTraits {
		if h, ok := predef.ByName(name); ok {
			ms, _ := predef.Memspace(h)
			return EnvSpec{Allocator: h, Memspace: ms}, nil
		}
		if ms, ok := memspace.ByName(name); ok && ms != memspace.Null {
			h, _ := predef.ForMemspace(ms)
			return EnvSpec{Allocator: h, Memspace: ms}, nil
		}
		return fail(nil, "unknown allocator or memory space %q", head)
	}
	ms, ok := memspace.ByName(name)
	if !ok || ms == memspace.Null {
		if _, isAlloc := predef.ByName(name); isAlloc {
			return fail(nil, "traits follow a memory space, not an allocator: %q", head)
		}
		return fail(nil, "unknown memory space %q", head)
	}
	if strings.TrimSpace(rest) == "" {
		return fail(nil, "no traits after %q", head+":")
	}
	var ts []traits.Trait
	for _, item := range strings.Split(rest, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return fail(nil, "empty trait in the list after %q", head+":")
		}
		k, v, ok := strings.Cut(item, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return fail(nil, "trait %q has no value (want key=value)", item)
		case k == "":
			return fail(nil, "missing trait name in %q", item)
		case v == "":
			return fail(nil, "missing value for trait %q", k)
		}
		key, known := traits.KeyByName(k)
		if !known || strings.HasPrefix(ascii.Lower(k), "omp_atk_") {
			return fail(nil, "unknown trait %q", k)
		}
		if !isEnvKey(key) {
			return fail(nil, "trait %q cannot be set through %s", k, envvar.Allocator)
		}
		val, err := key.ParseValue(v)
		if err != nil {
			// Quoted, as every value a warning repeats: a newline or ESC in
			// it must not reach the terminal raw (issue 29).
			return fail(err, "%s=%q: %s", key.Name(), v, reasonOf(err))
		}
		ts = append(ts, traits.Trait{Key: key, Value: val})
	}
	if _, err := traits.FromList(ts); err != nil {
		var te *traits.TraitError
		if errors.As(err, &te) {
			return fail(err, "%s=%s: %s", te.Key.Name(), te.Key.FormatValue(te.Value), te.Reason)
		}
		return fail(err, "%v", err)
	}
	return EnvSpec{Memspace: ms, Traits: ts}, nil
}

// reasonOf returns the Reason of a *traits.TraitError, or the error's text.
func reasonOf(err error) string {
	var te *traits.TraitError
	if errors.As(err, &te) {
		return te.Reason
	}
	return err.Error()
}

// String writes the spec back in OMP_ALLOCATOR syntax; ParseEnv of the result
// gives an equal EnvSpec.
func (e EnvSpec) String() string {
	if e.Allocator != 0 {
		return predef.Name(e.Allocator)
	}
	parts := make([]string, len(e.Traits))
	for i, t := range e.Traits {
		parts[i] = t.Key.Name() + "=" + t.Key.FormatValue(t.Value)
	}
	if len(parts) == 0 {
		return e.Memspace.String()
	}
	return e.Memspace.String() + ":" + strings.Join(parts, ",")
}
