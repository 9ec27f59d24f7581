package pinreg

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/sentinel"
)

// The reference model: a plain slice of entries and the obvious rules.

type mEntry struct {
	host, end, dev uintptr
	kind           Kind
	refs, mapped   int
	held           bool // made by Hold: only Release ends it
}

type model struct {
	entries                         []mEntry
	ext                             []External
	failLock, failUnlock, failQuery bool
}

func (m *model) at(p uintptr) int {
	for i, e := range m.entries {
		if p >= e.host && p < e.end {
			return i
		}
	}
	return -1
}

func (m *model) overlapping(p, end uintptr) []int {
	var out []int
	for i, e := range m.entries {
		if e.host < end && p < e.end {
			out = append(out, i)
		}
	}
	return out
}

// lock is Lock (mapped=false) or LockMapped with on/mandatory.
func (m *model) lock(p, n uintptr, mapped bool) (uintptr, error) {
	if bad(p, n) {
		return 0, sentinel.ErrInvalidArgument
	}
	end := p + n
	if ov := m.overlapping(p, end); len(ov) > 0 {
		e := &m.entries[ov[0]]
		if len(ov) > 1 || e.host > p || e.end < end {
			return 0, ErrOverlap
		}
		if mapped {
			e.mapped++
		} else {
			e.refs++
		}
		return e.dev + (p - e.host), nil
	}
	add := func(e mEntry) {
		if mapped {
			e.mapped = 1
		} else {
			e.refs = 1
		}
		m.entries = append(m.entries, e)
	}
	if m.failQuery {
		m.failQuery = false
		return 0, errFake
	}
	for _, x := range m.ext {
		if !(p < x.Host+x.Size && x.Host < end) {
			continue
		}
		if p < x.Host || end > x.Host+x.Size {
			return 0, ErrOverlap
		}
		e := mEntry{host: x.Host, end: x.Host + x.Size, dev: x.Dev, kind: KindExternal}
		if len(m.overlapping(e.host, e.end)) > 0 {
			e = mEntry{host: p, end: end, dev: x.Dev + (p - x.Host), kind: KindExternal}
		}
		add(e)
		return x.Dev + (p - x.Host), nil
	}
	if m.failLock {
		m.failLock = false
		return 0, errFake
	}
	add(mEntry{host: p, end: end, dev: p + devOffset, kind: KindLocked})
	return p + devOffset, nil
}

func (m *model) unlock(p uintptr, mapped bool) error {
	if p == 0 {
		return sentinel.ErrInvalidArgument
	}
	i := m.at(p)
	if i < 0 {
		return ErrNotLocked
	}
	e := &m.entries[i]
	c := &e.refs
	if mapped {
		c = &e.mapped
	}
	if *c == 0 {
		return ErrNotLocked
	}
	*c--
	if e.refs > 0 || e.mapped > 0 || e.kind == KindRegistered || e.held {
		return nil
	}
	kind := e.kind
	m.entries = append(m.entries[:i], m.entries[i+1:]...)
	if kind == KindLocked && m.failUnlock {
		m.failUnlock = false
		return errFake
	}
	return nil
}

func (m *model) hold(p, n uintptr) (uintptr, error) {
	if bad(p, n) {
		return 0, sentinel.ErrInvalidArgument
	}
	if len(m.overlapping(p, p+n)) > 0 {
		return 0, ErrOverlap
	}
	if m.failLock {
		m.failLock = false
		return 0, errFake
	}
	m.entries = append(m.entries, mEntry{host: p, end: p + n, dev: p + devOffset, kind: KindLocked, held: true})
	return p + devOffset, nil
}

func (m *model) release(p uintptr) (locks, mapped int, err error) {
	if p == 0 {
		return 0, 0, sentinel.ErrInvalidArgument
	}
	i := m.at(p)
	switch {
	case i < 0:
		return 0, 0, ErrNotLocked
	case m.entries[i].host != p || !m.entries[i].held:
		return 0, 0, sentinel.ErrInvalidArgument
	}
	e := m.entries[i]
	m.entries = append(m.entries[:i], m.entries[i+1:]...)
	if m.failUnlock {
		m.failUnlock = false
		return e.refs, e.mapped, errFake
	}
	return e.refs, e.mapped, nil
}

func (m *model) register(p, n uintptr) error {
	if bad(p, n) {
		return sentinel.ErrInvalidArgument
	}
	if len(m.overlapping(p, p+n)) > 0 {
		return ErrOverlap
	}
	m.entries = append(m.entries, mEntry{host: p, end: p + n, dev: p + 2*devOffset, kind: KindRegistered})
	return nil
}

func (m *model) unregister(p uintptr) error {
	if p == 0 {
		return sentinel.ErrInvalidArgument
	}
	i := m.at(p)
	switch {
	case i < 0:
		return ErrNotLocked
	case m.entries[i].kind != KindRegistered || m.entries[i].host != p:
		return sentinel.ErrInvalidArgument
	case m.entries[i].refs > 0 || m.entries[i].mapped > 0:
		return ErrBusy
	}
	m.entries = append(m.entries[:i], m.entries[i+1:]...)
	return nil
}

var sentinels = []error{ErrOverlap, ErrNotLocked, ErrBusy, sentinel.ErrInvalidArgument, errFake}

func class(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

// fuzzBase puts the 4 MiB playground across a 1 GiB boundary, so entries
// there use every page-table level.
const fuzzBase = uintptr(1<<30 - 2<<20)

func checkAgainstModel(t *testing.T, data []byte) {
	ext := External{Host: fuzzBase + 1<<20, Dev: 0xe000_0000, Size: 256 << 10}
	f := newFake(ext)
	r := New(f)
	m := &model{ext: []External{ext}}

	pick := func(a1, a2, sz byte) uintptr { // an address inside a model entry, or anywhere
		if a1&1 == 1 && len(m.entries) > 0 {
			e := m.entries[int(a2)%len(m.entries)]
			return e.host + uintptr(sz)*64%(e.end-e.host)
		}
		return fuzzBase + (uintptr(a1)<<8|uintptr(a2))*64
	}
	size := func(sz byte) uintptr {
		if sz&0x80 != 0 {
			return uintptr(sz&0x7f+1) * 32 << 10
		}
		return uintptr(sz) * 64 // 0 tests sentinel.ErrInvalidArgument
	}
	const maxOps = 300
	for i := 0; i+4 <= len(data) && i/4 < maxOps; i += 4 {
		op, a1, a2, sz := data[i], data[i+1], data[i+2], data[i+3]
		mode := MapMode(sz % 3)
		var desc string
		switch op % 10 {
		case 0, 8: // lock; 8 locks a sub-range of an entry
			p, n := fuzzBase+(uintptr(a1)<<8|uintptr(a2))*64, size(sz)
			if op%10 == 8 && len(m.entries) > 0 {
				e := m.entries[int(a2)%len(m.entries)]
				off := uintptr(a1) * 64 % (e.end - e.host)
				p, n = e.host+off, min(size(sz)+1, e.end-e.host-off)
			}
			desc = fmt.Sprintf("Lock(%#x, %d)", p, n)
			want, wantErr := m.lock(p, n, false)
			got, err := r.Lock(p, n)
			require.Equal(t, wantErr, class(err), "%s: %v", desc, err)
			if err == nil {
				require.Equal(t, want, got, desc)
			}
		case 1:
			p := pick(a1, a2, sz)
			desc = fmt.Sprintf("Unlock(%#x)", p)
			require.Equal(t, m.unlock(p, false), class(r.Unlock(p)), desc)
		case 2:
			p, n := fuzzBase+(uintptr(a1)<<8|uintptr(a2))*64, size(sz)
			desc = fmt.Sprintf("Register(%#x, %d)", p, n)
			require.Equal(t, m.register(p, n), class(r.Register(p, p+2*devOffset, n)), desc)
		case 3:
			p := pick(a1, a2, sz)
			if a1&2 == 0 && len(m.entries) > 0 { // usually an entry's start
				p = m.entries[int(a2)%len(m.entries)].host
			}
			desc = fmt.Sprintf("Unregister(%#x)", p)
			require.Equal(t, m.unregister(p), class(r.Unregister(p)), desc)
		case 4:
			p, n := pick(a1, a2, sz), size(sz)
			desc = fmt.Sprintf("LockMapped(%#x, %d, %v)", p, n, mode)
			var want uintptr
			var wantErr error
			wantLocked := false
			switch {
			case bad(p, n):
				wantErr = sentinel.ErrInvalidArgument
			case mode == MapOff:
				if j := m.at(p); j >= 0 && p+n <= m.entries[j].end {
					want = m.entries[j].dev + (p - m.entries[j].host)
				}
			default:
				want, wantErr = m.lock(p, n, true)
				wantLocked = wantErr == nil
				if mode == MapOn && wantErr != nil {
					want, wantErr = 0, nil
				}
			}
			got, locked, err := r.LockMapped(p, n, mode)
			require.Equal(t, wantErr, class(err), "%s: %v", desc, err)
			require.Equal(t, wantLocked, locked, desc)
			require.Equal(t, want, got, desc)
		case 5:
			p := pick(a1, a2, sz)
			desc = fmt.Sprintf("UnlockUnmapped(%#x, %v)", p, mode)
			var wantErr error
			if mode != MapOff {
				wantErr = m.unlock(p, true)
				if mode == MapOn {
					wantErr = nil
				}
			}
			require.Equal(t, wantErr, class(r.UnlockUnmapped(p, mode)), desc)
		case 6, 9:
			p := pick(a1, a2, sz)
			desc = fmt.Sprintf("Lookup(%#x)", p)
			got, ok := r.Lookup(p)
			j := m.at(p)
			require.Equal(t, j >= 0, ok, desc)
			require.Equal(t, ok, r.IsPinned(p), desc)
			if ok {
				require.Equal(t, m.entries[j].dev+(p-m.entries[j].host), got, desc)
				info, ok := r.Entry(p)
				require.True(t, ok)
				e := m.entries[j]
				require.Equal(t, EntryInfo{Host: e.host, Dev: e.dev, Size: e.end - e.host, Refs: e.refs,
					MappedRefs: e.mapped, External: e.kind == KindExternal, Kind: e.kind}, info, desc)
			}
		case 7:
			switch a1 % 5 {
			case 0:
				f.failLock, m.failLock = true, true
			case 1:
				f.failUnlock, m.failUnlock = true, true
			case 2:
				f.failQuery, m.failQuery = true, true
			case 3: // Hold, as a pinned heap holds its chunk
				p, n := fuzzBase+(uintptr(a2)<<8|uintptr(sz))*64, size(sz)
				desc = fmt.Sprintf("Hold(%#x, %d)", p, n)
				want, wantErr := m.hold(p, n)
				got, err := r.Hold(p, n, "fuzz")
				require.Equal(t, wantErr, class(err), "%s: %v", desc, err)
				if err == nil {
					require.Equal(t, want, got, desc)
				}
			case 4:
				p := pick(a2, sz, a1)
				if sz&1 == 0 && len(m.entries) > 0 { // usually an entry's start
					p = m.entries[int(a2)%len(m.entries)].host
				}
				desc = fmt.Sprintf("Release(%#x)", p)
				wl, wm, wantErr := m.release(p)
				gl, gm, err := r.Release(p)
				require.Equal(t, wantErr, class(err), "%s: %v", desc, err)
				if wantErr == nil || wantErr == errFake {
					require.Equal(t, [2]int{wl, wm}, [2]int{gl, gm}, desc)
				}
			}
			if desc == "" {
				desc = "fail next"
			}
		}
		require.Equal(t, len(m.entries), r.Len(), desc)
		requireVendorState(t, f, m, desc)
	}
	checkIndex(t, r)

	// Drop every reference: the registry empties and vendor locks balance.
	f.failLock, f.failUnlock, f.failQuery = false, false, false
	m.failLock, m.failUnlock, m.failQuery = false, false, false
	for len(m.entries) > 0 {
		e := m.entries[0]
		switch {
		case e.refs > 0:
			require.NoError(t, r.Unlock(e.host))
			require.NoError(t, m.unlock(e.host, false))
		case e.mapped > 0:
			require.NoError(t, r.UnlockUnmapped(e.end-1, MapMandatory))
			require.NoError(t, m.unlock(e.end-1, true))
		case e.held:
			_, _, err := r.Release(e.host)
			require.NoError(t, err)
			_, _, err = m.release(e.host)
			require.NoError(t, err)
		default:
			require.NoError(t, r.Unregister(e.host))
			require.NoError(t, m.unregister(e.host))
		}
	}
	require.Zero(t, r.Len())
	locks, unlocks, held, problems := f.snapshot()
	require.Empty(t, problems)
	require.Empty(t, held)
	require.Equal(t, locks, unlocks, "every vendor lock has exactly one vendor unlock")
	require.Equal(t, 1, r.pt.nodes(), "page table emptied")
	st := r.Stats()
	require.Zero(t, st.LockedBytes+st.ExternalBytes+st.RegisteredBytes)
	require.Equal(t, uint64(locks), st.VendorLocks)
}

// requireVendorState checks that what the fake device holds locked is
// exactly the model's locked entries, and that its failure flags were
// consumed as the model says.
func requireVendorState(t *testing.T, f *fakeLocker, m *model, desc string) {
	t.Helper()
	_, _, held, problems := f.snapshot()
	require.Empty(t, problems, desc)
	want := map[uintptr]uintptr{}
	for _, e := range m.entries {
		if e.kind == KindLocked {
			want[e.host] = e.end - e.host
		}
	}
	require.Equal(t, want, held, desc)
	f.mu.Lock()
	flags := [3]bool{f.failLock, f.failUnlock, f.failQuery}
	f.mu.Unlock()
	require.Equal(t, [3]bool{m.failLock, m.failUnlock, m.failQuery}, flags, desc)
}

// ops builds fuzz input from readable steps.
func ops(steps ...[4]byte) []byte {
	var b []byte
	for _, s := range steps {
		b = append(b, s[:]...)
	}
	return b
}

func FuzzRegistry(f *testing.F) {
	f.Add(ops(
		[4]byte{0, 0, 0, 64}, // lock a page at the base
		[4]byte{8, 0, 0, 3},  // lock inside it
		[4]byte{6, 1, 0, 5},  // lookup inside
		[4]byte{1, 1, 0, 0},  // unlock
		[4]byte{1, 1, 0, 0},  // unlock: gone
		[4]byte{1, 1, 0, 0},  // unlock: not locked
	))
	f.Add(ops(
		[4]byte{0, 0, 10, 20}, // lock [base+640, +1280)
		[4]byte{0, 0, 20, 20}, // partial overlap
		[4]byte{0, 0, 0, 12},  // starts before, reaches in
		[4]byte{0, 0, 40, 1},  // same page, separate entry
		[4]byte{6, 0, 41, 0},  // lookup in the shared page
		[4]byte{2, 0, 50, 10}, // register nearby
		[4]byte{4, 1, 2, 1},   // lockmapped on inside an entry
		[4]byte{3, 0, 2, 0},   // unregister
		[4]byte{5, 1, 2, 2},   // unlockunmapped mandatory
	))
	f.Add(ops(
		[4]byte{7, 0, 0, 0},    // next LockHost fails
		[4]byte{0, 0, 0, 64},   // lock fails
		[4]byte{7, 2, 0, 0},    // next ExternalLock fails
		[4]byte{4, 0, 0, 130},  // lockmapped mandatory fails
		[4]byte{0, 0, 0, 0x85}, // big lock: 192 KiB
		[4]byte{7, 1, 0, 0},    // next UnlockHost fails
		[4]byte{1, 1, 0, 0},    // unlock: erased, error
	))
	f.Add(ops(
		[4]byte{7, 3, 4, 0x81}, // hold 64 KiB
		[4]byte{8, 0, 0, 5},    // lock inside it
		[4]byte{1, 1, 0, 0},    // unlock: the lock's reference
		[4]byte{1, 1, 0, 0},    // unlock: not locked, the hold stays
		[4]byte{4, 1, 0, 1},    // lockmapped on inside it
		[4]byte{3, 0, 0, 0},    // unregister: not registered
		[4]byte{7, 1, 0, 0},    // next UnlockHost fails
		[4]byte{7, 4, 0, 0},    // release: drops the mapped ref, erased, error
		[4]byte{7, 3, 4, 0x81}, // hold again
		[4]byte{7, 3, 4, 0x81}, // overlap
		[4]byte{7, 4, 0, 2},    // release
	))
	f.Add(ops(
		[4]byte{0, 0x40, 0, 16}, // lock inside the external range
		[4]byte{0, 0x40, 100, 1},
		[4]byte{4, 0x41, 0, 0x81},
		[4]byte{0, 0x3f, 0xf0, 0xff}, // reaches into the external range
		[4]byte{2, 0x20, 0, 0xff},    // register 4 MiB across the 1 GiB boundary
		[4]byte{8, 0, 0, 5},
		[4]byte{3, 0, 0, 0},
		[4]byte{9, 1, 1, 1},
	))
	f.Fuzz(checkAgainstModel)
}
