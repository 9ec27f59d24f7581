package alloc

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/hooks"
)

var (
	leakCheck  atomic.Bool
	leakStacks sync.Map // uintptr → *leakRecord
)

type leakRecord struct {
	a     *Allocator
	size  uintptr
	stack []uintptr
}

func init() { SetLeakCheck(os.Getenv(envvar.LeakCheck) == "1") }

// SetLeakCheck turns leak-check mode on or off and returns the previous
// setting. Blocks allocated while it was off have no recorded stack.
func SetLeakCheck(on bool) (was bool) {
	leakMu.Lock()
	defer leakMu.Unlock()
	if on {
		hooks.FreeChecks.Add(1)  // one of free's reasons (FreeChecks), before it holds
		hooks.AllocChecks.Add(1) // the hot path records no stack: the general path does
	}
	if was = leakCheck.Swap(on); was {
		hooks.FreeChecks.Add(-1) // the reason it held until now
		hooks.AllocChecks.Add(-1)
	}
	return was
}

var leakMu sync.Mutex // orders SetLeakCheck's calls

// LeakCheck reports whether leak-check mode is on.
func LeakCheck() bool { return leakCheck.Load() }

// leakRecordAlloc remembers who allocated p (leak-check mode only).
func leakRecordAlloc(a *Allocator, p unsafe.Pointer, size uintptr) {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(3, pcs) // skip Callers, this function, try
	leakStacks.Store(uintptr(p), &leakRecord{a: a, size: size, stack: pcs[:n]})
}

func leakForget(p unsafe.Pointer) { leakStacks.Delete(uintptr(p)) }

// Live is one allocator's count of blocks not yet freed.
type Live struct {
	Allocator string // the allocator's name
	Handle    Handle
	Blocks    int64 // live blocks
	Bytes     int64 // their requested bytes
	Destroyed bool  // destroyed with these blocks still live
}

// String says it once: "omp_default_mem_alloc: 2 blocks (128 bytes)".
func (l Live) String() string {
	s := fmt.Sprintf("%s: %d %s (%d bytes)", l.Allocator, l.Blocks, plural(l.Blocks, "block", "blocks"), l.Bytes)
	if l.Destroyed {
		s += ", destroyed"
	}
	return s
}

// LiveBlocks returns every allocator, predefined or made with New and not
// yet released, that has blocks still allocated, in handle order. A
// program (or a test's TestMain) that has freed everything gets none.
func LiveBlocks() []Live {
	initOnce.Do(initPredefined)
	var out []Live
	allocators(func(a *Allocator) {
		st := a.shards.sum()
		if st.BlocksLive != 0 {
			out = append(out, Live{Allocator: a.name, Handle: a.Handle(), Blocks: st.BlocksLive,
				Bytes: st.BytesLive, Destroyed: a.head.Destroyed.Load()})
		}
	})
	return out
}

// LeakedBlock is a live block allocated in leak-check mode.
type LeakedBlock struct {
	Ptr       uintptr
	Size      uintptr
	Allocator string
	Stack     string // where it was allocated, one frame per line
}

// LeakedBlocks returns the blocks allocated while leak-check mode was on
// and not freed since, with the stacks that allocated them, by address.
func LeakedBlocks() []LeakedBlock {
	var out []LeakedBlock
	leakStacks.Range(func(k, v any) bool {
		r := v.(*leakRecord)
		out = append(out, LeakedBlock{Ptr: k.(uintptr), Size: r.size, Allocator: r.a.name, Stack: formatStack(r.stack)})
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Ptr < out[j].Ptr })
	return out
}

func formatStack(pcs []uintptr) string {
	var b strings.Builder
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if f.Function != "" && !strings.HasPrefix(f.Function, "runtime.") && !strings.HasPrefix(f.Function, "testing.") {
			fmt.Fprintf(&b, "\t%s\n\t\t%s:%d\n", f.Function, f.File, f.Line)
		}
		if !more {
			break
		}
	}
	return b.String()
}
