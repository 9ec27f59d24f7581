package gputest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/dlcall"
)

// Fail makes the nth call of the driver function call from now on fail
// (nth 1: the next one), or every call with nth 0, until t ends. A name
// starting "cu" is a CUDA driver function, written without _v2
// ("cuMemAlloc", "cuMemcpyHtoDAsync", "cuStreamSynchronize"); the call
// returns CUDA_ERROR_UNKNOWN. One starting "hsa_" is an HSA function
// ("hsa_amd_memory_pool_allocate", "hsa_amd_memory_async_copy"); it returns
// HSA_STATUS_ERROR_OUT_OF_RESOURCES. Calls are counted from the latest Fail
// of the same vendor: a second Fail restarts the count of the first.
//
// Fail sets the fake's FAKECUDA_FAIL or FAKEHSA_FAIL variable, which the
// fake reads at every call; it is process-wide, so do not use it in
// parallel tests.
func (f *Fake) Fail(t testing.TB, call string, nth int) {
	t.Helper()
	if nth < 0 {
		t.Fatalf("gputest: Fail(%q, %d): nth counts calls from 1 (0: every call)", call, nth)
	}
	var name, spec string
	switch {
	case strings.HasPrefix(call, "cu") && f.p.cfg.cuda > 0:
		name, spec = "FAKECUDA_FAIL", strings.TrimSuffix(call, "_v2")
		if nth > 0 {
			spec += fmt.Sprintf(":%d", nth)
		}
	case strings.HasPrefix(call, "hsa_") && f.p.cfg.hsa > 0:
		name, spec = "FAKEHSA_FAIL", call+":*"
		if nth > 0 {
			spec = fmt.Sprintf("%s:%d", call, nth)
		}
	case strings.HasPrefix(call, "cu") || strings.HasPrefix(call, "hsa_"):
		t.Fatalf("gputest: Fail(%q): no fake driver of that vendor was set up (%s)", call, f.p.cfg)
	default:
		t.Fatalf("gputest: Fail(%q): name a CUDA driver function (cuMemAlloc) or an HSA one (hsa_amd_memory_pool_allocate)", call)
	}
	f.p.failMu.Lock()
	defer f.p.failMu.Unlock()
	old := os.Getenv(name)
	val := spec
	if old != "" {
		val = old + "," + spec
	}
	if err := os.Setenv(name, val); err != nil {
		t.Fatalf("gputest: setting %s: %v", name, err)
	}
	t.Cleanup(func() {
		f.p.failMu.Lock()
		defer f.p.failMu.Unlock()
		_ = os.Setenv(name, old)
	})
}

// Hold keeps the fake devices' work pending until release (also run when
// t ends): the drivers' workers perform no queued copy, event record or
// event wait meanwhile, so queries say "not ready" and waits wait, however
// fast the host. A device busy with other work does the same: the drivers
// promise the order of a queue's work, never when it completes. Hold tests
// what code does while its copies are in flight (a context's cancellation,
// a buffer not reused too early) without sleeps. Holds nest.
func (f *Fake) Hold(t testing.TB) (release func()) {
	p := f.p
	p.holdMu.Lock()
	p.holds++
	if p.holds == 1 {
		p.gate(1)
	}
	p.holdMu.Unlock()
	done := false
	release = func() {
		p.holdMu.Lock()
		defer p.holdMu.Unlock()
		if done {
			return
		}
		done = true
		p.holds--
		if p.holds == 0 {
			p.gate(0)
		}
	}
	t.Cleanup(release)
	return release
}

// gate closes (1) or opens (0) the fakes' work gates: fakecuda's "stream",
// fakehsa's "copy".
func (p *process) gate(closed uintptr) {
	set := func(fn uintptr, name string) {
		b := append([]byte(name), 0)
		dlcall.Call(fn, uintptr(unsafe.Pointer(&b[0])), closed)
		runtime.KeepAlive(b)
	}
	if p.cfg.cuda > 0 {
		set(p.cudaHook["fakecuda_gate"], "stream")
	}
	if p.cfg.hsa > 0 {
		set(p.hsaHook["fakehsa_gate"], "copy")
	}
}
