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
	tableMu.Lock() // install gates a new allocator's hot path as leakCheck says
	defer tableMu.Unlock()
	if on {
		hooks.FreeChecks.Add(1) // one of free's reasons (FreeChecks), before it holds
	}
	if was = leakCheck.Swap(on); was {
		hooks.FreeChecks.Add(-1) // the reason it held until now
	}
	// The hot path records no stack: while the check is on, every
	// allocator's descriptor sends its allocations to the general path,
	// which does (heap.Fast.Gate; before this returns).
	allocators(func(a *Allocator) { a.head.Fast.Gate(on) })
	return was
}

var leakMu sync.Mutex // orders SetLeakCheck's calls

// leakRecordAlloc remembers who allocated p (leak-check mode only).
func leakRecordAlloc(a *Allocator, p unsafe.Pointer, size uintptr) {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(3, pcs) // skip Callers, this function, try
	leakStacks.Store(uintptr(p), &leakRecord{a: a, size: size, stack: pcs[:n]})
}

func leakForget(p unsafe.Pointer) { leakStacks.Delete(uintptr(p)) }

// Live is one allocator's blocks not yet freed: what LiveBlocks reports.
type Live struct {
	Allocator string // the allocator's name ("omp_default_mem_alloc", "allocator#1025(omp_default_mem_space)")
	Blocks    int64  // live blocks
	Bytes     int64  // their requested bytes
	Destroyed bool   // destroyed with these blocks still live
	// Stacks says where the live blocks allocated in leak-check mode
	// (SetLeakCheck, OMPALLOC_LEAKCHECK=1) were allocated, one entry per
	// block by address: "0xc000200000, 64 bytes" and, on the lines below,
	// the stack, one frame per two indented lines. Blocks allocated while
	// the mode was off have none: len(Stacks) < Blocks says some are
	// missing.
	Stacks []string
}

// LiveBlocks returns every allocator, predefined or made with New and not
// yet released, that has blocks still allocated, in handle order, with the
// stacks that allocated them where leak-check mode recorded them. A
// program (or a test's TestMain) that has freed everything gets none.
func LiveBlocks() []Live {
	initOnce.Do(initPredefined)
	stacks := map[*Allocator][]leakEntry{}
	leakStacks.Range(func(k, v any) bool {
		r := v.(*leakRecord)
		stacks[r.a] = append(stacks[r.a], leakEntry{k.(uintptr), r})
		return true
	})
	var out []Live
	allocators(func(a *Allocator) {
		st := a.shards.sum()
		if st.BlocksLive != 0 {
			l := Live{Allocator: a.name, Blocks: st.BlocksLive, Bytes: st.BytesLive, Destroyed: a.head.Destroyed.Load()}
			es := stacks[a]
			sort.Slice(es, func(i, j int) bool { return es[i].p < es[j].p })
			for _, e := range es {
				l.Stacks = append(l.Stacks, fmt.Sprintf("%#x, %d bytes\n%s", e.p, e.r.size, formatStack(e.r.stack)))
			}
			out = append(out, l)
		}
	})
	return out
}

// leakEntry is one recorded block: its address and record.
type leakEntry struct {
	p uintptr
	r *leakRecord
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
