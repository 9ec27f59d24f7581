//go:build linux || darwin

package amdgpu

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// hsa_status_t values (hsa.h), for matching errors:
// errors.Is(err, &Error{Code: StatusErrorOutOfResources}). The runtime names
// them itself through hsa_status_string; statusNames is the fallback.
const (
	StatusSuccess                     = 0x0
	StatusInfoBreak                   = 0x1
	StatusError                       = 0x1000
	StatusErrorInvalidArgument        = 0x1001
	StatusErrorInvalidQueueCreation   = 0x1002
	StatusErrorInvalidAllocation      = 0x1003
	StatusErrorInvalidAgent           = 0x1004
	StatusErrorInvalidRegion          = 0x1005
	StatusErrorInvalidSignal          = 0x1006
	StatusErrorInvalidQueue           = 0x1007
	StatusErrorOutOfResources         = 0x1008
	StatusErrorInvalidPacketFormat    = 0x1009
	StatusErrorResourceFree           = 0x100A
	StatusErrorNotInitialized         = 0x100B
	StatusErrorRefcountOverflow       = 0x100C
	StatusErrorIncompatibleArguments  = 0x100D
	StatusErrorInvalidIndex           = 0x100E
	StatusErrorInvalidISA             = 0x100F
	StatusErrorInvalidCodeObject      = 0x1010
	StatusErrorInvalidExecutable      = 0x1011
	StatusErrorFrozenExecutable       = 0x1012
	StatusErrorInvalidSymbolName      = 0x1013
	StatusErrorVariableAlreadyDefined = 0x1014
	StatusErrorVariableUndefined      = 0x1015
	StatusErrorException              = 0x1016
)

var statusNames = map[int]string{
	StatusSuccess:                     "HSA_STATUS_SUCCESS",
	StatusInfoBreak:                   "HSA_STATUS_INFO_BREAK",
	StatusError:                       "HSA_STATUS_ERROR",
	StatusErrorInvalidArgument:        "HSA_STATUS_ERROR_INVALID_ARGUMENT",
	StatusErrorInvalidQueueCreation:   "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION",
	StatusErrorInvalidAllocation:      "HSA_STATUS_ERROR_INVALID_ALLOCATION",
	StatusErrorInvalidAgent:           "HSA_STATUS_ERROR_INVALID_AGENT",
	StatusErrorInvalidRegion:          "HSA_STATUS_ERROR_INVALID_REGION",
	StatusErrorInvalidSignal:          "HSA_STATUS_ERROR_INVALID_SIGNAL",
	StatusErrorInvalidQueue:           "HSA_STATUS_ERROR_INVALID_QUEUE",
	StatusErrorOutOfResources:         "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
	StatusErrorInvalidPacketFormat:    "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT",
	StatusErrorResourceFree:           "HSA_STATUS_ERROR_RESOURCE_FREE",
	StatusErrorNotInitialized:         "HSA_STATUS_ERROR_NOT_INITIALIZED",
	StatusErrorRefcountOverflow:       "HSA_STATUS_ERROR_REFCOUNT_OVERFLOW",
	StatusErrorIncompatibleArguments:  "HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS",
	StatusErrorInvalidIndex:           "HSA_STATUS_ERROR_INVALID_INDEX",
	StatusErrorInvalidISA:             "HSA_STATUS_ERROR_INVALID_ISA",
	StatusErrorInvalidCodeObject:      "HSA_STATUS_ERROR_INVALID_CODE_OBJECT",
	StatusErrorInvalidExecutable:      "HSA_STATUS_ERROR_INVALID_EXECUTABLE",
	StatusErrorFrozenExecutable:       "HSA_STATUS_ERROR_FROZEN_EXECUTABLE",
	StatusErrorInvalidSymbolName:      "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME",
	StatusErrorVariableAlreadyDefined: "HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED",
	StatusErrorVariableUndefined:      "HSA_STATUS_ERROR_VARIABLE_UNDEFINED",
	StatusErrorException:              "HSA_STATUS_ERROR_EXCEPTION",
}

// Enumerations and attributes of hsa.h and hsa_ext_amd.h that are used here.
const (
	systemInfoVersionMajor = 0 // uint16_t
	systemInfoVersionMinor = 1 // uint16_t

	agentInfoName        = 0      // char[64]
	agentInfoDevice      = 17     // hsa_device_type_t
	amdAgentInfoProduct  = 0xA009 // char[64]
	amdAgentInfoBDFID    = 0xA006 // uint32_t (uint16_t in old headers): bus<<8 | device<<3 | function
	amdAgentInfoDomain   = 0xA00F // uint32_t: the PCI domain
	deviceTypeCPU        = 0
	deviceTypeGPU        = 1
	agentNameSize        = 64
	segmentGlobal        = 0
	poolInfoSegment      = 0 // hsa_amd_segment_t
	poolInfoGlobalFlags  = 1 // uint32_t
	poolInfoSize         = 2 // size_t
	poolInfoAllocAllowed = 5 // bool
	flagKernargInit      = 1
	flagFineGrained      = 2
	flagCoarseGrained    = 4

	pointerTypeUnknown = 0
	pointerTypeHSA     = 1
	pointerTypeLocked  = 2

	agentPoolInfoAccess = 0 // hsa_amd_agent_memory_pool_info_t
	accessNeverAllowed  = 0 // hsa_amd_memory_pool_access_t

	signalConditionEQ = 0
	waitStateBlocked  = 0
)

// pointerInfo is hsa_amd_pointer_info_t (ROCm 5.x, 64-bit). Size must be set
// to the bytes the caller provides; older runtimes fill less and say so.
type pointerInfo struct {
	Size        uint32
	Type        uint32
	AgentBase   uintptr
	HostBase    uintptr
	SizeInBytes uintptr
	UserData    uintptr
	AgentOwner  uint64
	GlobalFlags uint32
	_           uint32
}

// Error is a failed HSA call: which call, its hsa_status_t, and the
// runtime's name for it (from hsa_status_string, e.g.
// "HSA_STATUS_ERROR_OUT_OF_RESOURCES") with its description.
type Error struct {
	Call string // "hsa_amd_memory_lock"
	Code int    // 0x1008
	Name string // "HSA_STATUS_ERROR_OUT_OF_RESOURCES"
	Desc string // the runtime's description, "" when it gave none
}

// DriverCall names the failed function (plugin.CallError).
func (e *Error) DriverCall() string { return e.Call }

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (%#x)", e.Call, e.Name, e.Code)
	if e.Desc != "" {
		s += ": " + e.Desc
	}
	return s
}

// Is matches another *Error with the same code, and the same call when the
// target names one: errors.Is(err, &amdgpu.Error{Code: amdgpu.StatusErrorOutOfResources}).
// HSA_STATUS_ERROR_OUT_OF_RESOURCES from hsa_amd_memory_pool_allocate (the
// pool has no room: ROCr's "no memory available in the pool") also matches
// plugin.ErrOutOfMemory; from other calls it may mean threads or signals.
func (e *Error) Is(target error) bool {
	if target == plugin.ErrOutOfMemory {
		return e.Code == StatusErrorOutOfResources && e.Call == "hsa_amd_memory_pool_allocate"
	}
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Call == "" || t.Call == e.Call)
}

// Errors of the plugin itself; test with errors.Is.
var (
	// ErrNotAllocated: Free of an address this device's Alloc did not return
	// with that kind.
	ErrNotAllocated = errors.New("not allocated by this device")
	// ErrNotLocked: UnlockHost of an address LockHost did not lock.
	ErrNotLocked = sentinel.ErrNotLocked
	// ErrNoPool: the agent has no memory pool for the requested kind.
	ErrNoPool = errors.New("no memory pool for this kind")
	// ErrClosed: the device or queue was closed.
	ErrClosed = errors.New("closed")
	// ErrForeignQueue: a queue of another device or plugin.
	ErrForeignQueue = errors.New("queue of another device")
	// ErrPartialExternalLock: a range that starts in memory locked outside
	// this runtime but runs past its end.
	ErrPartialExternalLock = errors.New("range runs past an externally locked region")
	// ErrOverlap: a lock of a range that overlaps a range the plugin locked
	// without lying inside it.
	ErrOverlap = errors.New("overlaps a locked range")
	// ErrDeviceMemory: a lock (llvm_omp_target_lock_mem) of memory of a
	// GPU's pool (VRAM): only host memory can be locked.
	ErrDeviceMemory = errors.New("device memory (VRAM), not host memory")
	// ErrNoPeerAccess: a copy between two GPUs that cannot reach each
	// other's memory (PeerAccess said no).
	ErrNoPeerAccess = errors.New("the GPUs cannot reach each other's memory")
)

// syms are the runtime's entry points. All are in ROCm's libhsa-runtime64
// since 1.0 (see testdata/libhsa-runtime64.symbols); hsa_amd_pointer_info is
// optional because only external-lock detection needs it, and
// hsa_amd_agent_memory_pool_get_info because only peer copies do.
type syms struct {
	init, statusString, systemGetInfo                                uintptr
	iterateAgents, agentGetInfo, iteratePools, poolGetInfo           uintptr
	poolAllocate, poolFree, allowAccess, memLock, memUnlock          uintptr
	pointerInfo, signalCreate, signalDestroy, signalLoad, signalWait uintptr
	memAsyncCopy, agentPoolGetInfo                                   uintptr
	copyProfEnable, copyTime                                         uintptr // optional: async copy timestamps (event.go)
}

func (s *syms) table() []dl.Symbol {
	return []dl.Symbol{
		{Name: "hsa_init", Addr: &s.init},
		{Name: "hsa_status_string", Addr: &s.statusString},
		{Name: "hsa_system_get_info", Addr: &s.systemGetInfo},
		{Name: "hsa_iterate_agents", Addr: &s.iterateAgents},
		{Name: "hsa_agent_get_info", Addr: &s.agentGetInfo},
		{Name: "hsa_amd_agent_iterate_memory_pools", Addr: &s.iteratePools},
		{Name: "hsa_amd_memory_pool_get_info", Addr: &s.poolGetInfo},
		{Name: "hsa_amd_memory_pool_allocate", Addr: &s.poolAllocate},
		{Name: "hsa_amd_memory_pool_free", Addr: &s.poolFree},
		{Name: "hsa_amd_agents_allow_access", Addr: &s.allowAccess},
		{Name: "hsa_amd_memory_lock", Addr: &s.memLock},
		{Name: "hsa_amd_memory_unlock", Addr: &s.memUnlock},
		{Name: "hsa_amd_pointer_info", Addr: &s.pointerInfo, Optional: true},
		{Name: "hsa_signal_create", Addr: &s.signalCreate},
		{Name: "hsa_signal_destroy", Addr: &s.signalDestroy},
		{Name: "hsa_signal_load_scacquire", Addr: &s.signalLoad},
		{Name: "hsa_signal_wait_scacquire", Addr: &s.signalWait},
		{Name: "hsa_amd_memory_async_copy", Addr: &s.memAsyncCopy},
		{Name: "hsa_amd_agent_memory_pool_get_info", Addr: &s.agentPoolGetInfo, Optional: true},
		{Name: "hsa_amd_profiling_async_copy_enable", Addr: &s.copyProfEnable, Optional: true},
		{Name: "hsa_amd_profiling_get_async_copy_time", Addr: &s.copyTime, Optional: true},
	}
}

// raw calls fn. Like purego.SyscallN, pointers converted to uintptr in the
// call's argument list are kept alive and in place for the call's duration.
//
//go:uintptrescapes
func raw(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// status calls fn, which returns an hsa_status_t, and turns a failure into
// an *Error naming call. Pointer arguments behave as with raw.
//
//go:uintptrescapes
func (s *syms) status(call string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if code := int(int32(r)); code != StatusSuccess {
		return s.errorOf(call, code)
	}
	return nil
}

// errorOf builds the *Error of call failing with code, naming it as the
// runtime does.
func (s *syms) errorOf(call string, code int) *Error {
	e := &Error{Call: call, Code: code}
	var str uintptr
	if s.statusString != 0 {
		if int32(raw(s.statusString, uintptr(code), uintptr(unsafe.Pointer(&str)))) != StatusSuccess {
			str = 0
		}
	}
	if str != 0 {
		text := cString(str, 1024)
		name, desc, _ := strings.Cut(text, ":")
		if isIdent(name) {
			e.Name, e.Desc = name, strings.TrimSpace(desc)
		} else {
			e.Desc = strings.TrimSpace(text)
		}
	}
	if e.Name == "" {
		if n, ok := statusNames[code]; ok {
			e.Name = n
		} else {
			e.Name = fmt.Sprintf("HSA_STATUS_%#x", code)
		}
	}
	return e
}

// statusName is the runtime's name for code, as errorOf finds it.
func (s *syms) statusName(code int) string { return s.errorOf("", code).Name }

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// cString reads a NUL-terminated C string of at most max bytes.
func cString(p uintptr, max int) string {
	if p == 0 {
		return ""
	}
	n := uintptr(0)
	for int(n) < max && cmem.Bytes(p+n, 1)[0] != 0 {
		n++
	}
	return string(cmem.Bytes(p, n))
}

// fixedString reads a char[N] field filled by the runtime.
func fixedString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b))
}
