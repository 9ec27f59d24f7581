package traits

import (
	"fmt"
	"strings"

	"github.com/ompalloc/ompalloc/internal/ascii"
)

// Key is an allocator trait key, omp_alloctrait_key_t.
type Key uintptr

// The trait keys, numbered as in LLVM's omp.h (OpenMP 6.0).
const (
	SyncHint        Key = 1  // omp_atk_sync_hint
	Alignment       Key = 2  // omp_atk_alignment
	Access          Key = 3  // omp_atk_access
	PoolSize        Key = 4  // omp_atk_pool_size
	Fallback        Key = 5  // omp_atk_fallback
	FbData          Key = 6  // omp_atk_fb_data
	Pinned          Key = 7  // omp_atk_pinned
	Partition       Key = 8  // omp_atk_partition
	PinDevice       Key = 9  // omp_atk_pin_device
	PreferredDevice Key = 10 // omp_atk_preferred_device
	DeviceAccess    Key = 11 // omp_atk_device_access
	TargetAccess    Key = 12 // omp_atk_target_access
	AtomicScope     Key = 13 // omp_atk_atomic_scope
	PartSize        Key = 14 // omp_atk_part_size
	Partitioner     Key = 15 // omp_atk_partitioner (OpenMP 6.0; the official header spells it partioner)
	PartitionerArg  Key = 16 // omp_atk_partitioner_arg
)

// Value is an allocator trait value, omp_uintptr_t.
type Value = uintptr

// The named trait values, numbered as in LLVM's omp.h (OpenMP 6.0: omp_atv_all
// is 19 there, where OpenMP 5.x headers had 7).
const (
	False       Value = 0
	True        Value = 1
	Contended   Value = 3
	Uncontended Value = 4
	Serialized  Value = 5
	Private     Value = 6
	Device      Value = 7
	Thread      Value = 8
	Pteam       Value = 9
	Cgroup      Value = 10
	Environment Value = 15
	Nearest     Value = 16
	Blocked     Value = 17
	Interleaved Value = 18
	All         Value = 19
	Single      Value = 20
	Multiple    Value = 21
	Memspace    Value = 22
	// PartitionerValue is omp_atv_partitioner (OpenMP 6.0): partition by the
	// allocator's partitioner trait.
	PartitionerValue Value = 23
)

// The fallback values are untyped so that each serves both as a Trait.Value
// and as a FallbackMode (Set.Fallback == NullFb).
const (
	DefaultMemFb = 11
	NullFb       = 12
	AbortFb      = 13
	AllocatorFb  = 14
)

// Default is omp_atv_default: any key given this value takes its default.
const Default Value = ^Value(0)

// Trait is one key/value pair, omp_alloctrait_t.
type Trait struct {
	Key   Key
	Value uintptr
}

var keyNames = [...]string{
	SyncHint:        "sync_hint",
	Alignment:       "alignment",
	Access:          "access",
	PoolSize:        "pool_size",
	Fallback:        "fallback",
	FbData:          "fb_data",
	Pinned:          "pinned",
	Partition:       "partition",
	PinDevice:       "pin_device",
	PreferredDevice: "preferred_device",
	DeviceAccess:    "device_access",
	TargetAccess:    "target_access",
	AtomicScope:     "atomic_scope",
	PartSize:        "part_size",
	Partitioner:     "partitioner",
	PartitionerArg:  "partitioner_arg",
}

// Name returns the short name of a key as written in OMP_ALLOCATOR
// ("alignment"), or "" for an unknown key.
func (k Key) Name() string {
	if k == 0 || k >= Key(len(keyNames)) {
		return ""
	}
	return keyNames[k]
}

// String returns the omp.h name ("omp_atk_alignment"), or "Key(N)" for an
// unknown key.
func (k Key) String() string {
	if n := k.Name(); n != "" {
		return "omp_atk_" + n
	}
	return fmt.Sprintf("Key(%d)", uintptr(k))
}

// KeyByName finds a key by its short name ("alignment") or its omp.h name
// ("omp_atk_alignment"), ignoring case as OpenMP does for environment values.
func KeyByName(name string) (Key, bool) {
	n := strings.TrimPrefix(ascii.Lower(name), "omp_atk_")
	n = strings.Replace(n, "partioner", "partitioner", 1) // the 6.0 header's spelling
	for k := SyncHint; k <= PartitionerArg; k++ {
		if keyNames[k] == n {
			return k, true
		}
	}
	return 0, false
}

var valueNames = [...]string{
	False:        "false",
	True:         "true",
	Contended:    "contended",
	Uncontended:  "uncontended",
	Serialized:   "serialized",
	Private:      "private",
	Device:       "device",
	Thread:       "thread",
	Pteam:        "pteam",
	Cgroup:       "cgroup",
	DefaultMemFb: "default_mem_fb",
	NullFb:       "null_fb",
	AbortFb:      "abort_fb",
	AllocatorFb:  "allocator_fb",
	Environment:  "environment",
	Nearest:      "nearest",
	Blocked:      "blocked",
	Interleaved:  "interleaved",
	All:          "all",
	Single:       "single",
	Multiple:     "multiple",
	Memspace:     "memspace",
	23:           "partitioner",
}

// valueName returns the short name of a named value ("contended"), or "".
func valueName(v uintptr) string {
	if v == Default {
		return "default"
	}
	if v >= uintptr(len(valueNames)) {
		return ""
	}
	return valueNames[v]
}

// FallbackMode is the resolved fallback trait of an allocator: DefaultMemFb,
// NullFb, AbortFb or AllocatorFb.
type FallbackMode int

func (f FallbackMode) String() string {
	switch f {
	case DefaultMemFb, NullFb, AbortFb, AllocatorFb:
		return valueNames[f]
	}
	return fmt.Sprintf("FallbackMode(%d)", int(f))
}
