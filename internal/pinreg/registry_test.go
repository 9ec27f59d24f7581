package pinreg

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/sentinel"
)

const base = uintptr(0x7f00_0000_0000)

// step is one call in a scenario; err is the expected sentinel (nil for
// success) and msg fragments the error text must contain.
type step struct {
	op      string // lock, unlock, reg, unreg, map, unmap
	p, n    uintptr
	dev     uintptr // expected dev for lock/map (0: don't check)
	mode    MapMode
	locked  bool // expected locked for map
	err     error
	msg     []string
	failDrv bool // make the next Locker call fail
}

func run(t *testing.T, r *Registry, f *fakeLocker, steps []step) {
	t.Helper()
	for i, s := range steps {
		if s.failDrv {
			f.failLock, f.failUnlock = true, true
		}
		var err error
		var dev uintptr
		var locked bool
		switch s.op {
		case "lock":
			dev, err = r.Lock(s.p, s.n)
		case "unlock":
			err = r.Unlock(s.p)
		case "reg":
			err = r.Register(s.p, s.p+devOffset, s.n)
		case "unreg":
			err = r.Unregister(s.p)
		case "map":
			dev, locked, err = r.LockMapped(s.p, s.n, s.mode)
			require.Equal(t, s.locked, locked, "step %d %+v", i, s)
		case "unmap":
			err = r.UnlockUnmapped(s.p, s.mode)
		default:
			t.Fatalf("bad op %q", s.op)
		}
		f.failLock, f.failUnlock = false, false
		if s.err == nil {
			require.NoError(t, err, "step %d %+v", i, s)
		} else {
			require.ErrorIs(t, err, s.err, "step %d %+v", i, s)
		}
		for _, m := range s.msg {
			require.Contains(t, err.Error(), m, "step %d", i)
		}
		if s.dev != 0 {
			require.Equal(t, s.dev, dev, "step %d %+v", i, s)
		}
	}
}

func TestLockUnlockSemantics(t *testing.T) {
	a := base + 0x10000
	d := a + devOffset
	tests := []struct {
		name    string
		ext     []External
		steps   []step
		entries int
		locks   int // vendor locks
		unlocks int // vendor unlocks
	}{
		{"lock then unlock", nil, []step{
			{op: "lock", p: a, n: 4096, dev: d},
			{op: "unlock", p: a},
		}, 0, 1, 1},
		{"contained sub-range adds a ref at the same offset", nil, []step{
			{op: "lock", p: a, n: 8192, dev: d},
			{op: "lock", p: a + 100, n: 50, dev: d + 100},
			{op: "unlock", p: a + 100},
		}, 1, 1, 0},
		{"same range twice is two refs", nil, []step{
			{op: "lock", p: a, n: 4096},
			{op: "lock", p: a, n: 4096},
			{op: "unlock", p: a},
			{op: "unlock", p: a},
			{op: "unlock", p: a, err: ErrNotLocked, msg: []string{"0x7f0000010000", "no entry contains it"}},
		}, 0, 1, 1},
		{"interior pointer unlocks", nil, []step{
			{op: "lock", p: a, n: 4096},
			{op: "unlock", p: a + 4095},
		}, 0, 1, 1},
		{"runs past the end", nil, []step{
			{op: "lock", p: a, n: 4096},
			{op: "lock", p: a + 100, n: 4096, err: ErrOverlap,
				msg: []string{"[0x7f0000010064, 0x7f0000011064)", "locked [0x7f0000010000, 0x7f0000011000)"}},
		}, 1, 1, 0},
		{"starts before and reaches in", nil, []step{
			{op: "lock", p: a + 4096, n: 4096},
			{op: "lock", p: a, n: 4097, err: ErrOverlap,
				msg: []string{"[0x7f0000010000, 0x7f0000011001)", "locked [0x7f0000011000, 0x7f0000012000)"}},
		}, 1, 1, 0},
		{"spans several", nil, []step{
			{op: "lock", p: a, n: 100},
			{op: "lock", p: a + 200, n: 100},
			{op: "lock", p: a + 400, n: 100},
			{op: "lock", p: a + 50, n: 400, err: ErrOverlap, msg: []string{"and 2 more"}},
		}, 3, 3, 0},
		{"adjacent ranges are separate entries", nil, []step{
			{op: "lock", p: a, n: 100, dev: d},
			{op: "lock", p: a + 100, n: 100, dev: d + 100},
			{op: "unlock", p: a + 99},
			{op: "unlock", p: a + 100},
		}, 0, 2, 2},
		{"bad input", nil, []step{
			{op: "lock", p: 0, n: 10, err: sentinel.ErrInvalidArgument},
			{op: "lock", p: a, n: 0, err: sentinel.ErrInvalidArgument},
			{op: "lock", p: ^uintptr(0) - 5, n: 10, err: sentinel.ErrInvalidArgument},
			{op: "unlock", p: 0, err: sentinel.ErrInvalidArgument},
			{op: "reg", p: a, n: 0, err: sentinel.ErrInvalidArgument},
			{op: "unreg", p: 0, err: sentinel.ErrInvalidArgument},
		}, 0, 0, 0},
		{"failing LockHost inserts nothing", nil, []step{
			{op: "lock", p: a, n: 4096, failDrv: true, err: errFake, msg: []string{"[0x7f0000010000, 0x7f0000011000)"}},
			{op: "unlock", p: a, err: ErrNotLocked},
		}, 0, 0, 0},
		{"failing UnlockHost erases and reports", nil, []step{
			{op: "lock", p: a, n: 4096},
			{op: "unlock", p: a, failDrv: true, err: errFake, msg: []string{"entry erased"}},
			{op: "lock", p: a, n: 4096},
			{op: "unlock", p: a},
		}, 0, 2, 2},
		{"external memory is recorded, never unlocked", []External{{Host: a, Dev: 0xd000, Size: 1 << 20}}, []step{
			{op: "lock", p: a + 4096, n: 4096, dev: 0xd000 + 4096},
			{op: "lock", p: a + 8192, n: 100, dev: 0xd000 + 8192}, // hit: the whole external range is recorded
			{op: "unlock", p: a + 8192},
			{op: "unlock", p: a + 4096},
		}, 0, 0, 0},
		{"external range holding an entry: only the request is recorded", []External{{Host: a, Dev: 0xd000, Size: 1 << 20}}, []step{
			{op: "reg", p: a + 0x10000, n: 4096},
			{op: "lock", p: a + 0x1000, n: 100, dev: 0xd000 + 0x1000},
			{op: "lock", p: a + 0x2000, n: 10, dev: 0xd000 + 0x2000},
			{op: "lock", p: a + 0x1010, n: 10, dev: 0xd000 + 0x1010}, // hit
			{op: "unlock", p: a + 0x1000},
			{op: "unlock", p: a + 0x1000},
			{op: "unlock", p: a + 0x2000},
			{op: "unreg", p: a + 0x10000},
		}, 0, 0, 0},
		{"partly external", []External{{Host: a, Dev: 0xd000, Size: 4096}}, []step{
			{op: "lock", p: a + 4000, n: 200, err: ErrOverlap, msg: []string{"externally locked [0x7f0000010000, 0x7f0000011000)"}},
		}, 0, 0, 0},
		{"register, lock inside, unregister refused then done", nil, []step{
			{op: "reg", p: a, n: 1 << 16},
			{op: "lock", p: a + 64, n: 64, dev: d + 64},
			{op: "unreg", p: a, err: ErrBusy, msg: []string{"registered [0x7f0000010000, 0x7f0000020000)", "1 Lock"}},
			{op: "unlock", p: a + 64},
			{op: "unlock", p: a + 64, err: ErrNotLocked, msg: []string{"holds no Lock reference"}},
			{op: "unreg", p: a},
		}, 0, 0, 0},
		{"unregister misuse", nil, []step{
			{op: "reg", p: a, n: 8192},
			{op: "lock", p: a + 8192, n: 10},
			{op: "unreg", p: a + 1, err: sentinel.ErrInvalidArgument, msg: []string{"interior pointer"}},
			{op: "unreg", p: a + 8192, err: sentinel.ErrInvalidArgument, msg: []string{"not registered"}},
			{op: "unreg", p: a + 9000, err: ErrNotLocked},
			{op: "reg", p: a + 8000, n: 200, err: ErrOverlap},
		}, 2, 1, 0},
		{"mapped refs never consume Lock refs", nil, []step{
			{op: "lock", p: a, n: 4096},
			{op: "map", p: a, n: 4096, mode: MapOn, locked: true, dev: d},
			{op: "unmap", p: a, mode: MapMandatory},
			{op: "unmap", p: a, mode: MapMandatory, err: ErrNotLocked, msg: []string{"holds no LockMapped reference"}},
			{op: "unmap", p: a, mode: MapOn}, // ignored
			{op: "unlock", p: a},
		}, 0, 1, 1},
		{"Lock refs never consumed by unmaps; mapped entry outlives Unlock", nil, []step{
			{op: "map", p: a, n: 4096, mode: MapMandatory, locked: true},
			{op: "lock", p: a, n: 10},
			{op: "unlock", p: a},
			{op: "unlock", p: a, err: ErrNotLocked},
			{op: "unmap", p: a, mode: MapOn},
		}, 0, 1, 1},
		{"map off takes nothing but reports pinned memory", nil, []step{
			{op: "map", p: a, n: 4096, mode: MapOff, locked: false},
			{op: "reg", p: a, n: 4096},
			{op: "map", p: a + 8, n: 8, mode: MapOff, locked: false, dev: d + 8},
			{op: "unmap", p: a, mode: MapOff},
			{op: "unreg", p: a},
		}, 0, 0, 0},
		{"map on ignores failures, mandatory reports them", nil, []step{
			{op: "map", p: a, n: 4096, mode: MapOn, locked: false, failDrv: true},
			{op: "map", p: a, n: 4096, mode: MapMandatory, failDrv: true, err: errFake},
			{op: "lock", p: a, n: 4096},
			{op: "map", p: a + 1, n: 4096, mode: MapOn, locked: false},
			{op: "map", p: a + 1, n: 4096, mode: MapMandatory, err: ErrOverlap},
			{op: "map", p: a, n: 1, mode: MapMode(7), err: sentinel.ErrInvalidArgument},
			{op: "unmap", p: a + 8192, mode: MapOn},
			{op: "unmap", p: a + 8192, mode: MapMandatory, err: ErrNotLocked},
			{op: "unlock", p: a},
		}, 0, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(tt.ext...)
			r := New(f)
			run(t, r, f, tt.steps)
			require.Equal(t, tt.entries, r.Len())
			locks, unlocks, _, problems := f.snapshot()
			require.Empty(t, problems)
			require.Equal(t, tt.locks, locks, "vendor locks")
			require.Equal(t, tt.unlocks, unlocks, "vendor unlocks")
			checkIndex(t, r)
		})
	}
}

func TestLookupAndEntry(t *testing.T) {
	f := newFake()
	r := New(f)
	a := base + 0x1000_0000 + 100 // not page aligned: boundary pages
	_, err := r.Lock(a, 3*4096)
	require.NoError(t, err)
	_, err = r.Lock(a+3*4096, 10) // shares the tail page
	require.NoError(t, err)
	tests := []struct {
		p   uintptr
		dev uintptr
		ok  bool
	}{
		{a - 1, 0, false},
		{a, a + devOffset, true},
		{a + 5000, a + 5000 + devOffset, true},
		{a + 3*4096 - 1, a + 3*4096 - 1 + devOffset, true},
		{a + 3*4096, a + 3*4096 + devOffset, true},
		{a + 3*4096 + 9, a + 3*4096 + 9 + devOffset, true},
		{a + 3*4096 + 10, 0, false},
		{0, 0, false},
	}
	for _, tt := range tests {
		dev, ok := r.Lookup(tt.p)
		require.Equal(t, tt.ok, ok, "%#x", tt.p)
		require.Equal(t, tt.dev, dev, "%#x", tt.p)
		require.Equal(t, tt.ok, r.IsPinned(tt.p))
	}
	_, err = r.Lock(a+50, 10)
	require.NoError(t, err)
	info, ok := r.Entry(a + 1)
	require.True(t, ok)
	require.Equal(t, EntryInfo{Host: a, Dev: a + devOffset, Size: 3 * 4096, Refs: 2, Kind: KindLocked}, info)

	st := r.Stats()
	require.Equal(t, Stats{Entries: 2, LockedBytes: 3*4096 + 10, Hits: 1, Misses: 2, VendorLocks: 2}, st)

	var buf bytes.Buffer
	r.Dump(&buf)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	require.Equal(t, "[0x7f0010000064, 0x7f0010003064) size=12288 dev=0x8f0010000064 kind=locked refs=2 mapped=0", lines[0])
}

func TestLargeRangesUseBlocks(t *testing.T) {
	f := newFake()
	r := New(f)
	// 3 GiB + a bit, unaligned: blocks at the 1 GiB and 2 MiB levels.
	a := uintptr(0x7f00_0000_0000 - 0x1000_0000 + 123)
	n := uintptr(3<<30 + 5<<20 + 77)
	_, err := r.Lock(a, n)
	require.NoError(t, err)
	require.Less(t, r.pt.nodes(), 20, "a huge range needs few nodes")
	for _, off := range []uintptr{0, 1, 4096, 1 << 21, 1 << 30, 2<<30 + 12345, n - 1} {
		dev, ok := r.Lookup(a + off)
		require.True(t, ok, "%#x", off)
		require.Equal(t, a+off+devOffset, dev)
	}
	_, ok := r.Lookup(a + n)
	require.False(t, ok)
	_, ok = r.Lookup(a - 1)
	require.False(t, ok)
	require.NoError(t, r.Unlock(a+n/2))
	require.Equal(t, 1, r.pt.nodes(), "empty nodes are unlinked")
}

func TestHighAddresses(t *testing.T) {
	r := New(newFake())
	for _, p := range []uintptr{1, 8192, ^uintptr(0) - 8191} {
		_, err := r.Lock(p, 4096)
		require.NoError(t, err)
		dev, ok := r.Lookup(p + 4095)
		require.True(t, ok, "%#x", p)
		require.Equal(t, p+4095+devOffset, dev)
	}
	checkIndex(t, r)
	for _, p := range []uintptr{1, 8192, ^uintptr(0) - 8191} {
		require.NoError(t, r.Unlock(p))
	}
	require.Zero(t, r.Len())
	require.Equal(t, 1, r.pt.nodes())
}

func TestParseMapMode(t *testing.T) {
	tests := []struct {
		in   string
		want MapMode
		err  bool
	}{
		{"", MapOff, false},
		{"off", MapOff, false},
		{" ON ", MapOn, false},
		{"Mandatory", MapMandatory, false},
		{"yes", MapOff, true},
	}
	for _, tt := range tests {
		m, err := ParseMapMode(tt.in)
		if tt.err {
			require.ErrorIs(t, err, sentinel.ErrInvalidArgument)
			require.Contains(t, err.Error(), `"yes"`) // the caller names the variable
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, m)
	}
	require.Equal(t, "mandatory", MapMandatory.String())
	require.Equal(t, "registered", KindRegistered.String())
}

func TestFailingLockerLeavesNothing(t *testing.T) {
	a := base + 0x40000
	tests := []struct {
		name string
		set  func(f *fakeLocker)
		err  error
	}{
		{"LockHost fails", func(f *fakeLocker) { f.failLock = true }, errFake},
		{"ExternalLock fails", func(f *fakeLocker) { f.failQuery = true }, errFake},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			r := New(f)
			tt.set(f)
			_, err := r.Lock(a, 4096)
			require.ErrorIs(t, err, tt.err)
			require.Zero(t, r.Len())
			require.False(t, r.IsPinned(a))
			tt.set(f)
			_, locked, err := r.LockMapped(a, 4096, MapMandatory)
			require.ErrorIs(t, err, tt.err)
			require.False(t, locked)
			tt.set(f)
			_, locked, err = r.LockMapped(a, 4096, MapOn)
			require.NoError(t, err)
			require.False(t, locked)
			require.Zero(t, r.Len())
			locks, unlocks, held, problems := f.snapshot()
			require.Zero(t, locks)
			require.Zero(t, unlocks)
			require.Empty(t, held)
			require.Empty(t, problems)
			require.Equal(t, 1, r.pt.nodes())
			require.Equal(t, uint64(3), r.Stats().LockFailures)
		})
	}
}

// checkIndex verifies that the page table agrees with the tree for every
// page the entries touch and the pages around them.
func checkIndex(t *testing.T, r *Registry) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var probes []uintptr
	r.tree.Ascend(func(e *entry) bool {
		probes = append(probes, e.host-1, e.host, e.end-1, e.end, e.host+(e.end-e.host)/2)
		return true
	})
	for _, p := range probes {
		var want *entry
		if e := r.floor(p); e != nil && p < e.end {
			want = e
		}
		require.Same(t, want, r.find(p), "page table vs tree at %#x", p)
	}
}

func TestHitsCountedExactly(t *testing.T) {
	f := newFake()
	r := New(f)
	a := base + 0x2000_0000
	_, err := r.Lock(a, 4096)
	require.NoError(t, err)
	// More hits than an entry's word holds: the overflow goes through the
	// mutex and is folded into the registry's count.
	const hits = hitMax*2 + 17
	for i := 0; i < hits; i++ {
		if i%2 == 0 {
			_, err = r.Lock(a+uintptr(i%4000), 8)
			require.NoError(t, err)
			require.NoError(t, r.Unlock(a+7))
		} else {
			_, locked, err := r.LockMapped(a, 1, MapOn)
			require.NoError(t, err)
			require.True(t, locked)
			require.NoError(t, r.UnlockUnmapped(a, MapOn))
		}
	}
	st := r.Stats()
	require.Equal(t, uint64(hits), st.Hits)
	require.Equal(t, uint64(1), st.Misses)
	info, ok := r.Entry(a)
	require.True(t, ok)
	require.Equal(t, 1, info.Refs)
	require.Zero(t, info.MappedRefs)
	require.NoError(t, r.Unlock(a))
	require.Equal(t, uint64(hits), r.Stats().Hits, "hits of erased entries are kept")
}
