package traitenv_test

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"testing"

	"github.com/ompalloc/ompalloc/internal/predef"
	"github.com/ompalloc/ompalloc/internal/traitenv"
	"github.com/ompalloc/ompalloc/memspace"
	"github.com/ompalloc/ompalloc/traits"
)

// FuzzParseEnv: ParseEnv never panics; an accepted value names a valid memory
// space, its traits pass FromList, and writing it back parses to the same spec.
func FuzzParseEnv(f *testing.F) {
	for _, seed := range []string{
		"omp_default_mem_alloc",
		"omp_high_bw_mem_alloc",
		"omp_default_mem_space",
		"omp_large_cap_mem_space:alignment=16,pinned=true",
		"omp_high_bw_mem_space:pool_size=1048576,fallback=allocator_fb,fb_data=omp_low_lat_mem_alloc",
		"  omp_default_mem_space:alignment=512,pinned=false,access=all  ",
		"omp_const_mem_space:access=none,pinned=false",
		"omp_const_mem_space:alignment=3,pinned=",
		"OMP_LOW_LAT_MEM_SPACE:SYNC_HINT=PRIVATE,PARTITION=NEAREST",
		"omp_default_mem_space:pool_size=99999999999999999999",
		"omp_default_mem_space:,",
		"111",
		":",
		"=",
		"omp_default_mem_space:a=b=c",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		spec, err := traitenv.ParseEnv(value)
		if err != nil {
			if spec.Allocator != 0 || spec.Memspace != 0 || spec.Traits != nil {
				t.Fatalf("error %v with a non-zero spec %+v", err, spec)
			}
			return
		}
		if !slices.Contains(memspace.All(), spec.Memspace) {
			t.Fatalf("%q: accepted with invalid memory space %v", value, spec.Memspace)
		}
		if (spec.Allocator == 0) == (len(spec.Traits) == 0) {
			t.Fatalf("%q: want exactly one of Allocator and Traits, got %+v", value, spec)
		}
		if spec.Allocator != 0 {
			ms, ok := predef.Memspace(spec.Allocator)
			if !ok || ms != spec.Memspace {
				t.Fatalf("%q: allocator %d does not draw from %v", value, spec.Allocator, spec.Memspace)
			}
		}
		if _, err := traits.FromList(spec.Traits); err != nil {
			t.Fatalf("%q: accepted traits fail FromList: %v", value, err)
		}
		again, err := traitenv.ParseEnv(spec.String())
		if err != nil {
			t.Fatalf("%q: String() %q does not parse: %v", value, spec.String(), err)
		}
		if again.String() != spec.String() || again.Allocator != spec.Allocator || again.Memspace != spec.Memspace || len(again.Traits) != len(spec.Traits) {
			t.Fatalf("%q: round trip changed %+v into %+v", value, spec, again)
		}
		for i := range spec.Traits {
			if spec.Traits[i] != again.Traits[i] {
				t.Fatalf("%q: trait %d changed: %v -> %v", value, i, spec.Traits[i], again.Traits[i])
			}
		}
	})
}

// decodeTraits turns fuzz bytes into a trait list: per 9 bytes, a key byte
// (mostly the 14 real keys) and a value that is mostly small or Default.
func decodeTraits(data []byte) []traits.Trait {
	var ts []traits.Trait
	for len(data) >= 9 {
		k := traits.Key(data[0] % 17) // 0..16: a few unknown keys too
		raw := binary.LittleEndian.Uint64(data[1:9])
		var v uintptr
		switch raw >> 62 {
		case 0:
			v = uintptr(raw % 32) // named values and small numbers
		case 1:
			v = uintptr(1) << (raw % 64) // powers of two
		case 2:
			v = traits.Default
		default:
			v = uintptr(raw)
		}
		ts = append(ts, traits.Trait{Key: k, Value: v})
		data = data[9:]
	}
	return ts
}

// FuzzFromList: FromList never panics; an accepted list gives a Set that obeys
// the invariants and re-validates from its own Traits.
func FuzzFromList(f *testing.F) {
	enc := func(ts ...traits.Trait) []byte {
		var b []byte
		for _, t := range ts {
			b = append(b, byte(t.Key))
			b = binary.LittleEndian.AppendUint64(b, uint64(t.Value)%32)
		}
		return b
	}
	f.Add([]byte{})
	f.Add(enc(traits.Trait{Key: traits.Alignment, Value: 8}))
	f.Add(enc(traits.Trait{Key: traits.Fallback, Value: traits.AllocatorFb}, traits.Trait{Key: traits.FbData, Value: 2}))
	f.Add(enc(traits.Trait{Key: traits.Pinned, Value: traits.True}, traits.Trait{Key: traits.PoolSize, Value: 16}))
	f.Add(enc(traits.Trait{Key: traits.Access, Value: traits.Thread}, traits.Trait{Key: traits.AtomicScope, Value: traits.All}))
	f.Add(enc(traits.Trait{Key: traits.Fallback, Value: traits.AllocatorFb}))
	f.Fuzz(func(t *testing.T, data []byte) {
		ts := decodeTraits(data)
		s, err := traits.FromList(ts)
		if err != nil {
			if s != (traits.Set{}) {
				t.Fatalf("error %v with a non-zero Set", err)
			}
			return
		}
		if s.Alignment == 0 || bits.OnesCount64(uint64(s.Alignment)) != 1 {
			t.Fatalf("alignment %d is not a power of two", s.Alignment)
		}
		if s.Fallback == traits.AllocatorFb && s.FbData == 0 {
			t.Fatal("allocator_fb without fb_data accepted")
		}
		if s.Fallback != traits.AllocatorFb && s.FbData != 0 {
			t.Fatal("fb_data kept without allocator_fb")
		}
		if s.PinDevice < -1 || s.PreferredDevice < -1 {
			t.Fatalf("negative device %d/%d", s.PinDevice, s.PreferredDevice)
		}
		back, err := traits.FromList(s.Traits())
		if err != nil {
			t.Fatalf("Traits() of an accepted Set fails: %v (%v)", err, s.Traits())
		}
		if back != s {
			t.Fatalf("round trip changed %+v into %+v", s, back)
		}
	})
}
