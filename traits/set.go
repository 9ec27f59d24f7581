package traits

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ompalloc/ompalloc/internal/ascii"
	"github.com/ompalloc/ompalloc/internal/predef"
)

// ErrInvalidTrait is wrapped by every error about a trait key or value.
var ErrInvalidTrait = errors.New("invalid allocator trait")

// TraitError reports a bad trait. It unwraps to ErrInvalidTrait.
type TraitError struct {
	Key      Key
	Value    uintptr
	HasValue bool   // Value is meaningful (false for an unknown value name, say)
	Reason   string // what was wrong
}

func (e *TraitError) Error() string {
	if e.HasValue {
		return fmt.Sprintf("%v %v=%s: %s", ErrInvalidTrait, e.Key, errorValue(e.Key, e.Value), e.Reason)
	}
	return fmt.Sprintf("%v %v: %s", ErrInvalidTrait, e.Key, e.Reason)
}

func (e *TraitError) Unwrap() error { return ErrInvalidTrait }

// Set holds the validated, resolved traits of an allocator: every field has a
// value, defaults included.
type Set struct {
	SyncHint        uintptr      // Contended, Uncontended, Serialized or Private
	Alignment       uintptr      // a power of two; 1 means none asked (the engine applies its own minimum)
	Access          uintptr      // All, Memspace, Device, Cgroup, Pteam or Thread
	PoolSize        uintptr      // quota in bytes; 0 = no quota
	Fallback        FallbackMode // what happens when an allocation cannot be served
	FbData          uintptr      // fallback allocator handle when Fallback is AllocatorFb, else 0
	Pinned          bool         // page-locked memory
	Partition       uintptr      // Environment, Nearest, Blocked or Interleaved
	PinDevice       int          // device the memory is pinned for; -1 = default device
	PreferredDevice int          // -1 = none
	DeviceAccess    uintptr      // All, Memspace or Device
	TargetAccess    uintptr      // Single or Multiple
	AtomicScope     uintptr      // All or Device
	PartSize        uintptr      // 0 = implementation's choice
	Partitioner     uintptr      // partitioner handle (OpenMP 6.0) when Partition is PartitionerValue; else 0
	PartitionerArg  uintptr      // handed to the partitioner's compute routine
}

// defaults returns the traits of an allocator made with no traits (what
// FromList(nil) returns), as LLVM sets them: sync_hint contended, alignment 1, access all, no pool,
// fallback default_mem_fb (retry on omp_default_mem_alloc; FbData 0), not
// pinned, partition environment, default device, device_access memspace,
// target_access single, atomic_scope device.
func defaults() Set {
	return Set{
		SyncHint:        Contended,
		Alignment:       1,
		Access:          All,
		Fallback:        DefaultMemFb,
		Partition:       Environment,
		PinDevice:       -1,
		PreferredDevice: -1,
		DeviceAccess:    Memspace,
		TargetAccess:    Single,
		AtomicScope:     Device,
	}
}

// kind says how a key's value is checked.
type kind int

const (
	kEnum     kind = iota // one of rule.allowed
	kPow2                 // a power of two
	kPositive             // any integer > 0
	kDevice               // a device number, 0..MaxInt32
	kHandle               // an allocator handle
	kAny                  // any value
)

type rule struct {
	kind    kind
	allowed []uintptr // kEnum only
}

// rules lists the values OpenMP 6.0 allows for each key.
var rules = [...]rule{
	SyncHint:        {kEnum, []uintptr{Contended, Uncontended, Serialized, Private}},
	Alignment:       {kind: kPow2},
	Access:          {kEnum, []uintptr{All, Memspace, Device, Cgroup, Pteam, Thread}},
	PoolSize:        {kind: kPositive},
	Fallback:        {kEnum, []uintptr{DefaultMemFb, NullFb, AbortFb, AllocatorFb}},
	FbData:          {kind: kHandle},
	Pinned:          {kEnum, []uintptr{True, False}},
	Partition:       {kEnum, []uintptr{Environment, Nearest, Blocked, Interleaved, PartitionerValue}},
	PinDevice:       {kind: kDevice},
	PreferredDevice: {kind: kDevice},
	DeviceAccess:    {kEnum, []uintptr{All, Memspace, Device}},
	TargetAccess:    {kEnum, []uintptr{Single, Multiple}},
	AtomicScope:     {kEnum, []uintptr{All, Device}},
	PartSize:        {kind: kPositive},
	Partitioner:     {kind: kPositive}, // a handle; whether it is live is package alloc's to check
	PartitionerArg:  {kind: kAny},
}

func ruleOf(k Key) (rule, bool) {
	if k.Name() == "" {
		return rule{}, false
	}
	return rules[k], true
}

func (r rule) allows(v uintptr) bool {
	for _, a := range r.allowed {
		if v == a {
			return true
		}
	}
	return false
}

func (r rule) allowedNames() string {
	names := make([]string, len(r.allowed))
	for i, v := range r.allowed {
		names[i] = valueName(v)
	}
	return strings.Join(names, ", ")
}

// check validates v for key k (v is not Default).
func check(k Key, v uintptr) error {
	r, ok := ruleOf(k)
	if !ok {
		return &TraitError{Key: k, Value: v, HasValue: true, Reason: "unknown trait key"}
	}
	bad := func(reason string) error {
		return &TraitError{Key: k, Value: v, HasValue: true, Reason: reason}
	}
	switch r.kind {
	case kEnum:
		if r.allows(v) {
			return nil
		}
		return bad("want one of " + r.allowedNames())
	case kPow2:
		if v == 0 || v&(v-1) != 0 {
			return bad("alignment must be a power of two")
		}
	case kPositive:
		if v == 0 {
			return bad("must be greater than zero")
		}
	case kDevice:
		if v > math.MaxInt32 {
			return bad("want a device number (0 to 2147483647)")
		}
	case kHandle:
		// Any handle; whether it names a live allocator, and fallback cycles,
		// are checked by the allocator table (package alloc).
	}
	return nil
}

// FromList validates every trait and resolves them into a Set.
//
// Rules beyond the per-key values:
//   - Default (omp_atv_default) is accepted for every key and means the
//     key's default.
//   - A key given more than once: the last one wins, as in LLVM and libgomp.
//   - fallback allocator_fb needs a non-zero fb_data.
//   - fb_data given while the fallback is not allocator_fb is accepted and
//     ignored (Set.FbData stays 0), as LLVM ignores it.
//
// Whether fb_data names a live allocator, and fallback cycles, need the
// allocator table and are checked by package alloc. Errors are *TraitError
// and wrap ErrInvalidTrait.
func FromList(ts []Trait) (Set, error) {
	s := defaults()
	for _, t := range ts {
		if t.Value == Default {
			if _, ok := ruleOf(t.Key); !ok {
				return Set{}, &TraitError{Key: t.Key, Value: t.Value, HasValue: true, Reason: "unknown trait key"}
			}
			s.reset(t.Key)
			continue
		}
		if err := check(t.Key, t.Value); err != nil {
			return Set{}, err
		}
		s.set(t.Key, t.Value)
	}
	if s.Fallback == AllocatorFb && s.FbData == 0 {
		return Set{}, &TraitError{Key: Fallback, Value: AllocatorFb, HasValue: true,
			Reason: "allocator_fb needs an omp_atk_fb_data trait naming the fallback allocator"}
	}
	if s.Fallback != AllocatorFb {
		s.FbData = 0
	}
	if s.Partition == PartitionerValue && s.Partitioner == 0 {
		return Set{}, &TraitError{Key: Partition, Value: PartitionerValue, HasValue: true,
			Reason: "partition=partitioner needs an omp_atk_partitioner trait naming the partitioner"}
	}
	if s.Partition != PartitionerValue {
		s.Partitioner, s.PartitionerArg = 0, 0
	}
	return s, nil
}

// set stores a checked value.
func (s *Set) set(k Key, v uintptr) {
	switch k {
	case SyncHint:
		s.SyncHint = v
	case Alignment:
		s.Alignment = v
	case Access:
		s.Access = v
	case PoolSize:
		s.PoolSize = v
	case Fallback:
		s.Fallback = FallbackMode(v)
	case FbData:
		s.FbData = v
	case Pinned:
		s.Pinned = v == True
	case Partition:
		s.Partition = v
	case PinDevice:
		s.PinDevice = int(v)
	case PreferredDevice:
		s.PreferredDevice = int(v)
	case DeviceAccess:
		s.DeviceAccess = v
	case TargetAccess:
		s.TargetAccess = v
	case AtomicScope:
		s.AtomicScope = v
	case PartSize:
		s.PartSize = v
	case Partitioner:
		s.Partitioner = v
	case PartitionerArg:
		s.PartitionerArg = v
	}
}

// reset puts one key back to its default.
func (s *Set) reset(k Key) {
	d := defaults()
	switch k {
	case SyncHint:
		s.SyncHint = d.SyncHint
	case Alignment:
		s.Alignment = d.Alignment
	case Access:
		s.Access = d.Access
	case PoolSize:
		s.PoolSize = d.PoolSize
	case Fallback:
		s.Fallback = d.Fallback
	case FbData:
		s.FbData = d.FbData
	case Pinned:
		s.Pinned = d.Pinned
	case Partition:
		s.Partition = d.Partition
	case PinDevice:
		s.PinDevice = d.PinDevice
	case PreferredDevice:
		s.PreferredDevice = d.PreferredDevice
	case DeviceAccess:
		s.DeviceAccess = d.DeviceAccess
	case TargetAccess:
		s.TargetAccess = d.TargetAccess
	case AtomicScope:
		s.AtomicScope = d.AtomicScope
	case PartSize:
		s.PartSize = d.PartSize
	case Partitioner:
		s.Partitioner = d.Partitioner
	case PartitionerArg:
		s.PartitionerArg = d.PartitionerArg
	}
}

// Traits returns the shortest list, in key order, that FromList turns back
// into s: one trait per field that differs from the defaults
// (FromList(nil)). It is meant for a
// Set that FromList produced.
func (s Set) Traits() []Trait {
	d := defaults()
	var ts []Trait
	add := func(differs bool, k Key, v uintptr) {
		if differs {
			ts = append(ts, Trait{Key: k, Value: v})
		}
	}
	add(s.SyncHint != d.SyncHint, SyncHint, s.SyncHint)
	add(s.Alignment != d.Alignment, Alignment, s.Alignment)
	add(s.Access != d.Access, Access, s.Access)
	add(s.PoolSize != d.PoolSize, PoolSize, s.PoolSize)
	add(s.Fallback != d.Fallback, Fallback, uintptr(s.Fallback))
	add(s.FbData != d.FbData, FbData, s.FbData)
	add(s.Pinned != d.Pinned, Pinned, True)
	add(s.Partition != d.Partition, Partition, s.Partition)
	add(s.PinDevice != d.PinDevice, PinDevice, uintptr(s.PinDevice))
	add(s.PreferredDevice != d.PreferredDevice, PreferredDevice, uintptr(s.PreferredDevice))
	add(s.DeviceAccess != d.DeviceAccess, DeviceAccess, s.DeviceAccess)
	add(s.TargetAccess != d.TargetAccess, TargetAccess, s.TargetAccess)
	add(s.AtomicScope != d.AtomicScope, AtomicScope, s.AtomicScope)
	add(s.PartSize != d.PartSize, PartSize, s.PartSize)
	add(s.Partitioner != d.Partitioner, Partitioner, s.Partitioner)
	add(s.PartitionerArg != d.PartitionerArg, PartitionerArg, s.PartitionerArg)
	return ts
}

// String lists the traits that differ from the defaults as key=value pairs
// ("alignment=64,pinned=true"), or "defaults".
func (s Set) String() string {
	ts := s.Traits()
	if len(ts) == 0 {
		return "defaults"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.Key.Name() + "=" + formatValue(t.Key, t.Value)
	}
	return strings.Join(parts, ",")
}

// FormatValue writes v the way OMP_ALLOCATOR spells it for key k: a value
// name ("interleaved"), a decimal number, an allocator name, or "default".
func (k Key) FormatValue(v uintptr) string { return formatValue(k, v) }

// formatValue is FormatValue.
func formatValue(k Key, v uintptr) string {
	if v == Default {
		return "default"
	}
	r, ok := ruleOf(k)
	switch {
	case ok && r.kind == kEnum:
		if r.allows(v) {
			return valueName(v)
		}
	case ok && r.kind == kHandle:
		return predef.Name(v)
	}
	return strconv.FormatUint(uint64(v), 10)
}

// errorValue is formatValue plus, for a named value that the key does not
// take, its omp.h name: "7 (omp_atv_device)".
func errorValue(k Key, v uintptr) string {
	text := formatValue(k, v)
	if r, ok := ruleOf(k); ok && r.kind == kEnum && !r.allows(v) {
		if n := valueName(v); n != "" && v != Default {
			text += " (omp_atv_" + n + ")"
		}
	}
	return text
}

// ParseValue reads a value of key k as OMP_ALLOCATOR spells it (compared
// ignoring ASCII case): "default" for omp_atv_default, a value name
// ("blocked", "null_fb", "true"), a predefined allocator's name for
// fb_data, else a plain decimal number of bytes below 2^64-1 (no sign, no
// suffix such as K or M: neither LLVM nor libgomp accepts one). A bad value
// is a *TraitError naming what was wrong.
func (k Key) ParseValue(text string) (uintptr, error) {
	r, ok := ruleOf(k)
	if !ok {
		return 0, &TraitError{Key: k, Reason: "unknown trait key"}
	}
	lower := ascii.Lower(text)
	if lower == "default" {
		return Default, nil
	}
	switch r.kind {
	case kEnum:
		for _, a := range r.allowed {
			if valueName(a) == lower {
				return a, nil
			}
		}
		return 0, &TraitError{Key: k, Reason: fmt.Sprintf("unknown value %q (want one of %s)", text, r.allowedNames())}
	case kHandle:
		if h, ok := predef.ByName(lower); ok {
			return h, nil
		}
		return 0, &TraitError{Key: k, Reason: fmt.Sprintf("%q is not a predefined allocator name", text)}
	}
	// Numbers: decimal digits only; ParseUint refuses signs and, in base 10,
	// underscores. 2^64-1 is omp_atv_default's number, not a size: a value
	// that large is a mistake, not a way to ask for the default.
	n, err := strconv.ParseUint(text, 10, strconv.IntSize)
	if err != nil || uintptr(n) == Default {
		if err == nil || errors.Is(err, strconv.ErrRange) {
			return 0, &TraitError{Key: k, Reason: fmt.Sprintf("%q is too large", text)}
		}
		return 0, &TraitError{Key: k, Reason: fmt.Sprintf("%q is not a decimal number of bytes", text)}
	}
	return uintptr(n), nil
}
