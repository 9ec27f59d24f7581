package gputest

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/fakedrv"
	"github.com/ompalloc/ompalloc/target"
)

var (
	// ErrUnavailable is matched by Start's error when no fake driver can be
	// built here: no C compiler ($CC, default gcc), a compiler for another
	// architecture than the test binary's (an arm64 test under qemu needs
	// CC=aarch64-linux-gnu-gcc), or not linux. New skips the test instead.
	ErrUnavailable = errors.New("gputest: no fake GPU driver can be built here")
	// ErrTooLate is matched by Start's error (New fails the test with it)
	// when ompalloc loaded its GPU drivers before the fake was set up, or
	// when an earlier New or Start of the process set the fake up with
	// another configuration: a process loads its driver once.
	ErrTooLate = errors.New("gputest: the GPU drivers of this process are already loaded")
)

// Fake is the fake driver (or drivers) this process loaded, as one test
// sees it. Its methods are safe for concurrent use.
type Fake struct {
	p     *process
	tb    testing.TB // New's test, nil from Start
	start Counts     // the counts when New set up this test's view
}

// process is what the first New or Start of the process loaded.
type process struct {
	cfg        config
	cudaLib    string
	hsaLib     string
	cudaHook   map[string]uintptr // fakecuda_* test hooks
	hsaHook    map[string]uintptr // fakehsa_* test hooks
	failMu     sync.Mutex         // serialises Fail's read-modify-write of the variables
	holdMu     sync.Mutex
	holds      int // Hold calls not yet released
	numDevices int
}

var (
	mu      sync.Mutex
	current *process
)

// New sets up the fake GPU driver for t's test binary (or joins the one
// an earlier New or Start set up, which must have asked for the same
// configuration), and checks at the end of t that the driver caught no
// misuse and that the device memory allocated during t was freed. It skips
// t when no fake can be built here (see ErrUnavailable) and fails it when
// ompalloc had loaded its drivers already (ErrTooLate): call it, or Start
// in TestMain, before anything touches a device.
func New(t testing.TB, opts ...Option) *Fake {
	t.Helper()
	cfg, err := newConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	f, err := start(cfg)
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	f.tb = t
	f.start = f.Counts()
	t.Cleanup(func() { f.check(t, cfg.allowLeaks) })
	return f
}

// Start is New for TestMain, where there is no test: it sets the fake up
// for the process (or returns the one set up already, if its configuration
// is the same) and returns an error matching ErrUnavailable or ErrTooLate
// where New would skip or fail. A TestMain typically skips every test on
// ErrUnavailable:
//
//	func TestMain(m *testing.M) {
//		if _, err := gputest.Start(gputest.CUDA(2)); err != nil {
//			fmt.Println("skipping the GPU tests:", err)
//			os.Exit(0)
//		}
//		os.Exit(m.Run())
//	}
//
// Start's Fake makes no end-of-test checks: call New in a test for them.
func Start(opts ...Option) (*Fake, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return start(cfg)
}

func start(cfg config) (*Fake, error) {
	mu.Lock()
	defer mu.Unlock()
	if p := current; p != nil {
		if !p.cfg.same(cfg) {
			return nil, fmt.Errorf("%w: the fake was set up with %s, this asks for %s (one configuration per test binary)",
				ErrTooLate, p.cfg, cfg)
		}
		return &Fake{p: p}, nil
	}
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%w: the fakes are linux shared objects (this is %s)", ErrUnavailable, runtime.GOOS)
	}
	p := &process{cfg: cfg}
	var err error
	if cfg.cuda > 0 {
		if p.cudaLib, p.cudaHook, err = build("fakecuda", "fakecuda_live", "fakecuda_pool_misuse", "fakecuda_gate",
			"fakecuda_calls", "fakecuda_used"); err != nil {
			return nil, err
		}
	}
	if cfg.hsa > 0 {
		if p.hsaLib, p.hsaHook, err = build("fakehsa", "fakehsa_count", "fakehsa_gate"); err != nil {
			return nil, err
		}
	}
	for _, kv := range cfg.env(p.cudaLib, p.hsaLib) {
		if err := os.Setenv(kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("gputest: setting %s: %w", kv[0], err)
		}
	}
	// Discovery loads the drivers now (or found them loaded before).
	if err := p.loaded(); err != nil {
		return nil, err
	}
	current = p
	return &Fake{p: p}, nil
}

// build compiles a fake and binds its test hooks.
func build(name string, hooks ...string) (string, map[string]uintptr, error) {
	lib, err := fakedrv.BuildPath(name)
	if errors.Is(err, fakedrv.ErrNoCompiler) {
		return "", nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err != nil {
		return "", nil, fmt.Errorf("gputest: building the fake %s: %w", name, err)
	}
	l, err := dl.Open(dl.Spec{Name: "fake driver " + name, Candidates: []string{lib}})
	if err != nil {
		return "", nil, fmt.Errorf("gputest: %w", err)
	}
	m := map[string]uintptr{}
	for _, h := range hooks {
		if m[h], err = l.Sym(h); err != nil {
			return "", nil, fmt.Errorf("gputest: %w", err)
		}
	}
	return lib, m, nil
}

// loaded checks that the drivers ompalloc uses are the fakes, with the
// devices asked for.
func (p *process) loaded() error {
	want := map[string]struct {
		lib string
		n   int
	}{"cuda": {p.cudaLib, p.cfg.cuda}, "amdgpu": {p.hsaLib, p.cfg.hsa}}
	for _, s := range target.Plugins() {
		w, ok := want[s.Plugin]
		if !ok || w.n == 0 {
			continue
		}
		if s.Library != w.lib {
			return fmt.Errorf("%w: the %s plugin uses %q (%s), not the fake: call gputest.New or Start before anything touches a device (TestMain is the safe place)",
				ErrTooLate, s.Plugin, s.Library, s.Init)
		}
		if s.Err != nil {
			return fmt.Errorf("gputest: the fake %s driver did not initialise: %w", s.Plugin, s.Err)
		}
	}
	n := map[string]int{}
	for _, d := range target.Devices() {
		n[d.Plugin()]++
	}
	if n["cuda"] != p.cfg.cuda || n["amdgpu"] != p.cfg.hsa {
		return fmt.Errorf("%w: ompalloc sees %d CUDA and %d AMD devices where %s asks for %d and %d (the driver was initialised before)",
			ErrTooLate, n["cuda"], n["amdgpu"], p.cfg, p.cfg.cuda, p.cfg.hsa)
	}
	p.numDevices = p.cfg.cuda + p.cfg.hsa
	return nil
}

// Devices returns ompalloc's devices on the fake drivers: the CUDA ones
// (devices 0 to CUDA(n)-1), then the AMD ones. The host device is
// target.Get(target.InitialDevice()). After target.Shutdown the next call
// returns the devices discovered anew.
func (f *Fake) Devices() []*target.Device {
	var ds []*target.Device
	for _, d := range target.Devices() {
		if !d.IsHost() {
			ds = append(ds, d)
		}
	}
	return ds
}
