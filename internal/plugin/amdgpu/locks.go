package amdgpu

import (
	"fmt"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/regtab"
	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// lockTable is every host range the plugin locked with hsa_amd_memory_lock,
// for all its devices, with the agent pointer the runtime returned at lock
// time: the process's one table of them (internal/regtab, in Exact mode),
// which tells this file what to lock and unlock, outside its mutex. It is
// the plugin's memory of its locks, as LLVM's pinned map is its: where
// libhsakmt locks through the KFD SVM API, hsa_amd_pointer_info answers
// HSA_EXT_POINTER_TYPE_UNKNOWN for locked memory, so asking the runtime
// again would treat pinned memory as pageable (lock again for every copy)
// and never see a lock another device made.
//
// Ranges are locked for every GPU agent (as LLVM does, with no agent list),
// so one lock serves all devices: a LockHost inside a range another device
// locked, and a copy from it, only add a reference; the last reference
// unlocks. A range overlapping a lock without lying inside it is refused
// (ErrOverlap): ROCr's unlock counts nothing, so two locks of one page range
// cannot be told apart by the runtime.
type lockTable = regtab.Table[*device, uintptr]

func newLockTable(fn *syms) *lockTable {
	return regtab.New[*device, uintptr](regtab.Config[uintptr]{
		Exact:      true,
		Unregister: func(r regtab.Reg[uintptr]) error { return fn.unlock(r.Host) },
		NotLocked:  ErrNotLocked,
		Overlap:    ErrOverlap,
	})
}

// unlock is hsa_amd_memory_unlock of the lock starting at base. A failure
// says sentinel.ErrStillLocked, so the caller (the registry, the pinned heap)
// keeps its own record and may retry. That is what ROCr makes true:
// MemoryRegion::Unlock ignores what unmapping and deregistering find and
// returns HSA_STATUS_SUCCESS, so a failure comes from before it changed
// anything (HSA_STATUS_ERROR_NOT_INITIALIZED, an exception turned into a
// status), and an unlock of memory no longer locked succeeds: a retry is
// always safe. Its success also says nothing about a lock made outside the
// plugin: nothing here relies on unlock failing for memory not locked.
func (fn *syms) unlock(base uintptr) error {
	if err := fn.status("hsa_amd_memory_unlock", fn.memUnlock, base); err != nil {
		return fmt.Errorf("%w: %w", err, sentinel.ErrStillLocked)
	}
	return nil
}

// lockFor locks [p, p+n) for agents, outside the table (a lock the table
// asked for, or the user's own in tests).
func (fn *syms) lockFor(agents []uint64, p, n uintptr) (uintptr, error) {
	var dev uintptr
	err := fn.status("hsa_amd_memory_lock", fn.memLock, p, n, uintptr(unsafe.Pointer(&agents[0])), uintptr(len(agents)), uintptr(unsafe.Pointer(&dev)))
	return dev, err
}

// agentPointer is the address the GPUs use for p, inside the lock all[0]
// (an Exact table's lock lies in one): its agent pointer from lock time.
func agentPointer(p uintptr, all, _ []regtab.Reg[uintptr]) (uintptr, error) {
	return all[0].Val + (p - all[0].Host), nil
}

// loan is the references a copy holds on the locks it reads until it
// completed (lockTable.Borrow), dropped by lockTable.Return.
type loan = regtab.Loan[uintptr]

// piece is part of a copy's host range and the address the GPU uses for it.
type piece struct {
	off, n, addr uintptr
}
