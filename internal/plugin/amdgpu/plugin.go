package amdgpu

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/plugin"
	"github.com/ompalloc/ompalloc/loader"
)

// Library is how the HSA runtime is found: the soname first, then the
// development link; OMPALLOC_HSA_LIBRARY names another file instead, and
// OMPALLOC_DISABLE_HSA=1 switches the plugin off.
var Library = dl.Spec{
	Name:       "HSA runtime",
	Candidates: []string{"libhsa-runtime64.so.1", "libhsa-runtime64.so"},
	EnvPath:    "OMPALLOC_HSA_LIBRARY",
	EnvDisable: "OMPALLOC_DISABLE_HSA",
}

// New returns the AMD GPU plugin. Nothing is loaded until Init, Status or
// Devices is first called.
func New() plugin.Plugin { return &Plugin{lazy: dl.Lazy{Spec: Library}} }

// Plugin is the AMD GPU plugin. It is safe for concurrent use.
type Plugin struct {
	lazy dl.Lazy
	once sync.Once

	// Set once by load.
	lib      *dl.Library
	fn       syms
	path     string // the library file, resolved where the OS tells
	version  string
	initName string
	err      error
	devices  []plugin.Impl

	locks *lockTable // every range locked for the devices, see lockTable
}

func (p *Plugin) Name() string { return "amdgpu" }

// Init loads the runtime, calls hsa_init and enumerates the GPU agents,
// once. A missing runtime is an error wrapping loader.ErrNotFound; a failing
// hsa_init wraps loader.ErrInitFailed and an *Error naming the status.
func (p *Plugin) Init() error {
	p.once.Do(p.load)
	return p.err
}

// Status reports the library, the HSA version the runtime implements, and
// hsa_init's result by the runtime's name for it. It loads the runtime.
func (p *Plugin) Status() plugin.Status {
	p.once.Do(p.load)
	s := plugin.Status{Plugin: p.Name(), Version: p.version, Init: p.initName, Err: p.err, Advice: advice(p.err)}
	if p.lib != nil {
		s.Library = p.path
	}
	if s.Init == "" && p.err != nil {
		s.Init = p.err.Error()
	}
	return s
}

// Devices returns one device per GPU agent, in the runtime's order; none
// when Init failed.
func (p *Plugin) Devices() []plugin.Impl {
	p.once.Do(p.load)
	return append([]plugin.Impl(nil), p.devices...)
}

func (p *Plugin) load() {
	p.locks = newLockTable(&p.fn)
	lib, err := p.lazy.Get()
	if err != nil {
		p.err = err
		return
	}
	p.lib, p.path = lib, lib.Path
	if err := lib.Bind(p.fn.table()); err != nil {
		p.err = err
		return
	}
	if full := libraryFile(p.fn.init); full != "" {
		p.path = full
	}
	if err := p.fn.status("hsa_init", p.fn.init); err != nil {
		var he *Error
		if errors.As(err, &he) {
			p.initName = he.Name
		}
		p.err = fmt.Errorf("%s %s: %w: %w", p.lib.Name, p.path, loader.ErrInitFailed, err)
		return
	}
	p.initName = p.fn.statusName(StatusSuccess)
	// hsa_shut_down is never called: the runtime stays up for the process,
	// as drivers are never unloaded.
	p.version = p.fn.version()
	p.devices, p.err = p.enumerate()
}

// version is "major.minor" of the HSA specification the runtime implements.
func (s *syms) version() string {
	var major, minor uint16
	if s.status("hsa_system_get_info", s.systemGetInfo, systemInfoVersionMajor, uintptr(unsafe.Pointer(&major))) != nil ||
		s.status("hsa_system_get_info", s.systemGetInfo, systemInfoVersionMinor, uintptr(unsafe.Pointer(&minor))) != nil {
		return ""
	}
	return fmt.Sprintf("%d.%d", major, minor)
}

// pool is one hsa_amd_memory_pool_t and what Init learned of it.
type pool struct {
	handle uint64
	flags  uint32
	size   uint64
}

// agentPools is what an agent offers for allocation in its global segment.
type agentPools struct {
	coarse, fine, kernarg *pool
}

// enumerate finds the CPU agent's fine-grained pool (host memory) and one
// device per GPU agent.
func (p *Plugin) enumerate() ([]plugin.Impl, error) {
	agents, err := p.fn.iterate("hsa_iterate_agents", p.fn.iterateAgents)
	if err != nil {
		return nil, err
	}
	var cpu uint64
	var host *pool
	type gpu struct {
		agent uint64
		pools agentPools
	}
	var gpus []gpu
	for _, a := range agents {
		var typ uint32
		if err := p.fn.status("hsa_agent_get_info", p.fn.agentGetInfo, uintptr(a), agentInfoDevice, uintptr(unsafe.Pointer(&typ))); err != nil {
			return nil, err
		}
		switch typ {
		case deviceTypeCPU:
			if host != nil {
				continue // the first CPU agent's pool serves the host
			}
			ps, err := p.pools(a)
			if err != nil {
				return nil, err
			}
			if h := ps.hostPool(); h != nil {
				cpu, host = a, h
			}
		case deviceTypeGPU:
			ps, err := p.pools(a)
			if err != nil {
				return nil, err
			}
			gpus = append(gpus, gpu{agent: a, pools: ps})
		}
	}
	all := make([]uint64, len(gpus))
	for i, g := range gpus {
		all[i] = g.agent
	}
	devs := make([]plugin.Impl, 0, len(gpus))
	for i, g := range gpus {
		d, err := p.newDevice(i, g.agent, cpu, all, g.pools, host)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// hostPool is the fine-grained pool host memory comes from, preferring one
// that is not also the kernel-argument pool.
func (ps agentPools) hostPool() *pool {
	if ps.fine != nil {
		return ps.fine
	}
	return ps.kernarg
}

// pools sorts an agent's global, allocatable pools by granularity.
func (p *Plugin) pools(agent uint64) (agentPools, error) {
	var ps agentPools
	handles, err := p.fn.iterate("hsa_amd_agent_iterate_memory_pools", p.fn.iteratePools, uintptr(agent))
	if err != nil {
		return ps, err
	}
	for _, h := range handles {
		var segment, flags uint32
		var size uint64
		var allowed uint64 // a C bool is one byte; the rest stays zero
		get := func(attr uintptr, out unsafe.Pointer) error {
			return p.fn.status("hsa_amd_memory_pool_get_info", p.fn.poolGetInfo, uintptr(h), attr, uintptr(out))
		}
		if err := get(poolInfoSegment, unsafe.Pointer(&segment)); err != nil {
			return ps, err
		}
		if segment != segmentGlobal {
			continue
		}
		for _, q := range []struct {
			attr uintptr
			out  unsafe.Pointer
		}{{poolInfoGlobalFlags, unsafe.Pointer(&flags)}, {poolInfoSize, unsafe.Pointer(&size)}, {poolInfoAllocAllowed, unsafe.Pointer(&allowed)}} {
			if err := get(q.attr, q.out); err != nil {
				return ps, err
			}
		}
		if allowed&0xff == 0 {
			continue
		}
		pl := &pool{handle: h, flags: flags, size: size}
		switch {
		case flags&flagCoarseGrained != 0 && ps.coarse == nil:
			ps.coarse = pl
		case flags&flagFineGrained != 0 && flags&flagKernargInit == 0 && ps.fine == nil:
			ps.fine = pl
		case flags&flagFineGrained != 0 && ps.kernarg == nil:
			ps.kernarg = pl
		}
	}
	return ps, nil
}
