//go:build linux || darwin

package amdgpu

import (
	"fmt"
	"sync"

	"github.com/ebitengine/purego"
)

// One C callback serves both iterations: hsa_iterate_agents calls
// callback(hsa_agent_t, void *data) and hsa_amd_agent_iterate_memory_pools
// calls callback(hsa_amd_memory_pool_t, void *data); both handles are a
// struct of one uint64_t, passed by value in one integer register. purego
// allows at most 2000 callbacks per process and never frees them, so it is
// created once; each iteration's list is found through data, an integer key
// into lists (a Go pointer must not be handed to C).
var (
	collectOnce sync.Once
	collectFn   uintptr
	collectErr  error

	listsMu sync.Mutex
	listKey uintptr
	lists   = map[uintptr]*[]uint64{}
)

// collector returns the C function pointer of collect, created once.
func collector() (uintptr, error) {
	collectOnce.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				collectErr = fmt.Errorf("amdgpu: purego callbacks unavailable on this platform: %v", r)
			}
		}()
		collectFn = purego.NewCallback(collect)
	})
	return collectFn, collectErr
}

// collect appends handle to the list registered under data. It must not
// panic: a panic cannot unwind through the runtime's C frames.
func collect(handle, data uintptr) (status uintptr) {
	defer func() {
		if recover() != nil {
			status = StatusError
		}
	}()
	listsMu.Lock()
	defer listsMu.Unlock()
	l := lists[data]
	if l == nil {
		return StatusError
	}
	*l = append(*l, uint64(handle))
	return StatusSuccess
}

// iterate runs an HSA iteration whose callback and data are the last two
// arguments of fn, after args, and returns the handles it reported.
func (s *syms) iterate(call string, fn uintptr, args ...uintptr) ([]uint64, error) {
	cb, err := collector()
	if err != nil {
		return nil, err
	}
	var got []uint64
	listsMu.Lock()
	listKey++
	key := listKey
	lists[key] = &got
	listsMu.Unlock()
	err = s.status(call, fn, append(args, cb, key)...)
	listsMu.Lock()
	delete(lists, key)
	listsMu.Unlock()
	if err != nil {
		return nil, err
	}
	return got, nil
}
