package memprof

import (
	"bytes"
	"compress/gzip"
	"expvar"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ompalloc/ompalloc/alloc"
	"github.com/ompalloc/ompalloc/internal/device"
	"github.com/ompalloc/ompalloc/internal/memsample"
	"github.com/ompalloc/ompalloc/target"
)

// SetRate turns sampling on with one sample per rate bytes allocated on
// average (1: every allocation; 512 << 10 is Go's own default
// runtime.MemProfileRate), or off with 0 (a negative rate is 0), and
// returns the rate it replaced (0: it was off), so that a caller can put
// it back. Blocks already sampled stay in the profile until they are freed.
func SetRate(rate int) (old int) {
	rateMu.Lock()
	defer rateMu.Unlock()
	old = memsample.Rate()
	memsample.SetRate(rate)
	return old
}

// rateMu orders SetRate's calls, so that each returns the rate the one
// before it set.
var rateMu sync.Mutex

// WriteHeapProfile writes the sampled blocks as a gzip-compressed pprof
// profile (profile.proto), as runtime/pprof writes Go's heap profile:
// sample types alloc_objects, alloc_space, inuse_objects and inuse_space
// (the default), labels "allocator", "memspace" and "pinned".
func WriteHeapProfile(w io.Writer) error {
	buckets, rate := memsample.Snapshot()
	zw := gzip.NewWriter(w)
	if _, err := zw.Write(encode(buckets, rate)); err != nil {
		return fmt.Errorf("memprof: write heap profile: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("memprof: write heap profile: %w", err)
	}
	return nil
}

// Handler serves the heap profile, as net/http/pprof's heap handler does
// for Go's heap: mount it next to it, e.g. at /debug/pprof/ompalloc.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var buf bytes.Buffer
		if err := WriteHeapProfile(&buf); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="ompalloc-heap"`)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(buf.Bytes())
	})
}

// scale is the runtime's scaleHeapSample: a block of size bytes was
// sampled with probability 1-exp(-size/rate), so count and bytes are
// divided by it.
func scale(count, bytes int64, rate int) (int64, int64) {
	if count == 0 || bytes == 0 {
		return 0, 0
	}
	if rate <= 1 {
		return count, bytes
	}
	avg := float64(bytes) / float64(count)
	s := 1 / (1 - math.Exp(-avg/float64(rate)))
	return int64(float64(count) * s), int64(float64(bytes) * s)
}

// trimmed drops the frames inside ompalloc's own allocation path from the
// top of a stack, so that it starts at the exported call (alloc.Make,
// (*Allocator).Alloc, kmp.Alloc, ...).
func trimmed(stk []uintptr) []uintptr {
	for len(stk) > 0 {
		f := runtime.FuncForPC(stk[0] - 1)
		if f == nil {
			break
		}
		name := f.Name()
		if !strings.HasPrefix(name, "github.com/ompalloc/ompalloc/") {
			break
		}
		rest := strings.TrimPrefix(name, "github.com/ompalloc/ompalloc/")
		last := rest[strings.LastIndexByte(rest, '.')+1:]
		if !strings.HasPrefix(rest, "internal/") && last != "" && last[0] >= 'A' && last[0] <= 'Z' {
			break
		}
		stk = stk[1:]
	}
	// The exported call's own frame is kept at its entry, not at the line
	// that called further in: the hot path and the general path of one
	// call (alloc.(*Allocator).Alloc's heap.AllocEntry and its general
	// path) are one location, so one call site of the user's is one stack.
	// An inlined frame (no Func of its own: kmp.Alloc, inlined into its
	// caller with the engine's call, whose hot and general paths both
	// return to that call) is left as it is.
	if len(stk) > 0 {
		fr, _ := runtime.CallersFrames(stk[:1]).Next()
		if fr.Func != nil && strings.HasPrefix(fr.Function, "github.com/ompalloc/ompalloc/") {
			stk = append([]uintptr{fr.Entry + 1}, stk[1:]...)
		}
	}
	return stk
}

// merged trims each bucket's stack and adds up the buckets left with the
// same stack and labels (they differed only inside ompalloc).
func merged(buckets []memsample.Bucket) []memsample.Bucket {
	type key struct {
		stk    string
		labels memsample.Labels
	}
	idx := map[key]int{}
	var out []memsample.Bucket
	for _, b := range buckets {
		b.Stack = trimmed(b.Stack)
		k := key{fmt.Sprint(b.Stack), b.Labels}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, b)
			continue
		}
		o := &out[i]
		o.Allocs += b.Allocs
		o.AllocBytes += b.AllocBytes
		o.Frees += b.Frees
		o.FreeBytes += b.FreeBytes
	}
	return out
}

// encode builds the profile.proto message (github.com/google/pprof's
// proto/profile.proto) by hand, as runtime/pprof does.
func encode(buckets []memsample.Bucket, rate int) []byte {
	var e pbuf
	strs := map[string]int64{"": 0}
	strList := []string{""}
	str := func(s string) int64 {
		if i, ok := strs[s]; ok {
			return i
		}
		strs[s] = int64(len(strList))
		strList = append(strList, s)
		return int64(len(strList) - 1)
	}
	valueType := func(field int, typ, unit string) {
		var m pbuf
		m.int64(1, str(typ))
		m.int64(2, str(unit))
		e.bytes(field, m.b)
	}
	valueType(1, "alloc_objects", "count")
	valueType(1, "alloc_space", "bytes")
	valueType(1, "inuse_objects", "count")
	valueType(1, "inuse_space", "bytes")

	buckets = merged(buckets)
	sort.Slice(buckets, func(i, j int) bool {
		return buckets[i].AllocBytes-buckets[i].FreeBytes > buckets[j].AllocBytes-buckets[j].FreeBytes
	})
	locs := map[uintptr]uint64{}
	var locOrder []uintptr
	for _, b := range buckets {
		stk := b.Stack
		var s pbuf
		ids := make([]uint64, len(stk))
		for i, pc := range stk {
			id, ok := locs[pc]
			if !ok {
				id = uint64(len(locOrder) + 1)
				locs[pc] = id
				locOrder = append(locOrder, pc)
			}
			ids[i] = id
		}
		s.packedUint64(1, ids)
		ao, ab := scale(b.Allocs, b.AllocBytes, rate)
		inO, inB := scale(b.Allocs-b.Frees, b.AllocBytes-b.FreeBytes, rate)
		s.packedInt64(2, []int64{ao, ab, inO, inB})
		label := func(k, v string) {
			var l pbuf
			l.int64(1, str(k))
			l.int64(2, str(v))
			s.bytes(3, l.b)
		}
		label("allocator", b.Labels.Allocator)
		label("memspace", b.Labels.Memspace)
		label("pinned", fmt.Sprint(b.Labels.Pinned))
		e.bytes(2, s.b)
	}

	// One mapping for the executable, marked symbolized: every location
	// carries its functions and lines.
	exe, _ := os.Executable()
	var m pbuf
	m.uint64(1, 1)
	m.int64(5, str(exe))
	m.bool(7, true)
	m.bool(8, true)
	m.bool(9, true)
	m.bool(10, true)
	e.bytes(3, m.b)

	funcs := map[string]uint64{}
	var fnames []string
	var ffiles []string
	for i, pc := range locOrder {
		var l pbuf
		l.uint64(1, uint64(i+1))
		l.uint64(2, 1)
		l.uint64(3, uint64(pc))
		// The frames at pc, innermost (inlined) first, as profile.proto
		// orders a location's lines.
		frames := runtime.CallersFrames([]uintptr{pc})
		for {
			fr, more := frames.Next()
			name := fr.Function
			if name == "" {
				name = fmt.Sprintf("%#x", pc)
			}
			fid, ok := funcs[name]
			if !ok {
				fid = uint64(len(fnames) + 1)
				funcs[name] = fid
				fnames = append(fnames, name)
				ffiles = append(ffiles, fr.File)
			}
			var ln pbuf
			ln.uint64(1, fid)
			ln.int64(2, int64(fr.Line))
			l.bytes(4, ln.b)
			if !more {
				break
			}
		}
		e.bytes(4, l.b)
	}
	for i, name := range fnames {
		var f pbuf
		f.uint64(1, uint64(i+1))
		f.int64(2, str(name))
		f.int64(3, str(name))
		f.int64(4, str(ffiles[i]))
		e.bytes(5, f.b)
	}
	// period_type and period, the default sample type, the time: then the
	// string table, which must hold every string used above.
	var pt pbuf
	pt.int64(1, str("space"))
	pt.int64(2, str("bytes"))
	comment := str(fmt.Sprintf("ompalloc off-heap memory, sampled every %d bytes on average", rate))
	def := str("inuse_space")
	for _, s := range strList {
		e.string(6, s)
	}
	e.int64(9, time.Now().UnixNano())
	e.bytes(11, pt.b)
	e.int64(12, int64(rate))
	e.int64(13, comment)
	e.int64(14, def)
	return e.b
}

// pbuf is a protocol buffer message being written.
type pbuf struct{ b []byte }

func (p *pbuf) varint(x uint64) {
	for x >= 0x80 {
		p.b = append(p.b, byte(x)|0x80)
		x >>= 7
	}
	p.b = append(p.b, byte(x))
}

func (p *pbuf) key(field, wire int) { p.varint(uint64(field)<<3 | uint64(wire)) }

func (p *pbuf) uint64(field int, x uint64) {
	p.key(field, 0)
	p.varint(x)
}

func (p *pbuf) int64(field int, x int64) { p.uint64(field, uint64(x)) }

func (p *pbuf) bool(field int, x bool) {
	if x {
		p.uint64(field, 1)
	}
}

func (p *pbuf) bytes(field int, b []byte) {
	p.key(field, 2)
	p.varint(uint64(len(b)))
	p.b = append(p.b, b...)
}

func (p *pbuf) string(field int, s string) { p.bytes(field, []byte(s)) }

func (p *pbuf) packedUint64(field int, xs []uint64) {
	var q pbuf
	for _, x := range xs {
		q.varint(x)
	}
	p.bytes(field, q.b)
}

func (p *pbuf) packedInt64(field int, xs []int64) {
	var q pbuf
	for _, x := range xs {
		q.varint(uint64(x))
	}
	p.bytes(field, q.b)
}

// The pinned pools and the accelerators' device memory (target's
// MemoryStats of each device opened so far) as expvar "ompalloc".
func init() {
	expvar.Publish("ompalloc", expvar.Func(func() any {
		return map[string]any{
			"pinned":        alloc.ReadPinnedStats(),
			"profile_rate":  memsample.Rate(),
			"device_memory": deviceMemory(),
		}
	}))
}

// deviceEntry is one device's entry of expvar "ompalloc"'s device_memory.
type deviceEntry struct {
	Device int    `json:"device"`
	Plugin string `json:"plugin"`
	Name   string `json:"name"`
	target.MemoryStats
}

// deviceMemory lists the figures of the accelerators opened so far: reading
// the expvar neither discovers devices nor opens one (device.Current, and
// only devices found open). A device target never handed out has no books
// yet: its figures are zero.
func deviceMemory() []deviceEntry {
	out := []deviceEntry{}
	w := device.Current()
	if w == nil {
		return out
	}
	for _, cd := range w.Devices() {
		if cd.IsHost() || !cd.Opened() || cd.Closed() {
			continue
		}
		e := deviceEntry{Device: cd.ID, Plugin: cd.Plugin(), Name: cd.Info().Name}
		if l := cd.Layer(); l != nil {
			if d, ok := l.Public().(*target.Device); ok {
				e.MemoryStats = d.MemoryStats()
			}
		}
		out = append(out, e)
	}
	return out
}
