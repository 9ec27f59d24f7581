//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/dl"
	"github.com/ompalloc/ompalloc/internal/envsize"
	"github.com/ompalloc/ompalloc/internal/numa"
	"github.com/ompalloc/ompalloc/internal/plugin/cuda"
)

// Schema names the JSON layout.
const Schema = "ompalloc-gpuprobe/1"

// Report is the JSON written.
type Report struct {
	Schema        string    `json:"schema"`
	Library       string    `json:"library"`
	DriverVersion int       `json:"driver_version"`
	Devices       int       `json:"devices"`
	GPUNode       int       `json:"gpu_node"` // device 0's NUMA node as ompalloc reads it; -1 unknown
	Nodes         []int     `json:"nodes"`
	SizeBytes     int64     `json:"size_bytes"`
	Questions     []*Answer `json:"questions"`
	Error         string    `json:"error,omitempty"` // the driver could not be asked at all
	ElapsedNs     int64     `json:"elapsed_ns"`
}

// Answer is one question's answer: a short verdict, and the driver's
// result codes and times it rests on.
type Answer struct {
	Name     string         `json:"name"`
	Question string         `json:"question"`
	Answer   string         `json:"answer,omitempty"`
	Results  map[string]any `json:"results,omitempty"`
	Skipped  string         `json:"skipped,omitempty"`
	Error    string         `json:"error,omitempty"`
}

func (a *Answer) set(k string, v any) {
	if a.Results == nil {
		a.Results = map[string]any{}
	}
	a.Results[k] = v
}

// The driver is used from this one thread: contexts are per thread.
func init() { runtime.LockOSThread() }

func main() {
	lib := flag.String("lib", "", "libcuda to load (default: $OMPALLOC_CUDA_LIBRARY, else libcuda.so.1)")
	out := flag.String("o", "", "write the JSON to `FILE` (rewritten after each question) instead of stdout")
	size := flag.String("size", "256M", "bytes of the bandwidth and busy-stream buffers, like 64M")
	flag.Parse()
	n, err := envsize.Parse(*size)
	if err != nil || n < 1<<20 {
		fmt.Fprintf(os.Stderr, "gpuprobe: -size %q: want a size of at least 1M\n", *size)
		os.Exit(2)
	}
	os.Exit(run(*lib, *out, uintptr(n)))
}

func run(lib, out string, size uintptr) int {
	start := time.Now()
	if lib == "" {
		lib = os.Getenv("OMPALLOC_CUDA_LIBRARY")
	}
	if lib == "" {
		lib = "libcuda.so.1"
	}
	// ompalloc's own calls (caller_context, node_bandwidth) load the same file.
	_ = os.Setenv("OMPALLOC_CUDA_LIBRARY", lib)
	rep := &Report{Schema: Schema, Library: lib, GPUNode: -1, SizeBytes: int64(size), Questions: []*Answer{}, Nodes: numa.System().IDs()}
	write := func() error {
		rep.ElapsedNs = int64(time.Since(start))
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		data = append(data, '\n')
		if out == "" {
			return nil
		}
		tmp := out + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, out)
	}
	finish := func(code int) int {
		if err := write(); err != nil {
			fmt.Fprintln(os.Stderr, "gpuprobe:", err)
			return 1
		}
		if out == "" {
			data, _ := json.MarshalIndent(rep, "", "  ")
			fmt.Println(string(data))
		}
		return code
	}
	d, err := openDriver(lib)
	if err == nil {
		err = d.init(rep)
	}
	if err != nil {
		rep.Error = err.Error()
		fmt.Fprintln(os.Stderr, "gpuprobe:", err)
		return finish(1)
	}
	p := &prober{d: d, size: size, rep: rep}
	for _, q := range questions {
		a := &Answer{Name: q.name, Question: q.question}
		rep.Questions = append(rep.Questions, a)
		fmt.Fprintf(os.Stderr, "gpuprobe: %s ...\n", q.name)
		if err := guard(func() error { return q.ask(p, a) }); err != nil {
			var skip errSkip
			if errors.As(err, &skip) {
				a.Skipped = skip.Error()
			} else {
				a.Error = err.Error()
			}
		}
		p.d.restore() // each question starts on device 0's primary context
		if err := write(); err != nil {
			fmt.Fprintln(os.Stderr, "gpuprobe:", err)
			return 1
		}
	}
	return finish(0)
}

func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v", r)
		}
	}()
	return f()
}

// driver is libcuda's entry points the probe calls, from the CUDA plugin's
// own binding (cuda.Bound): one symbol table of libcuda in the module.
type driver struct {
	fn   map[string]uintptr
	ctx0 uintptr // device 0's primary context
	dev0 int32
}

// The entry points the probe needs, as the library exports them; those
// marked optional may be missing (the fake has no cuCtxCreate): the question
// that needs one says so.
var symbols = []struct {
	name     string
	optional bool
}{
	{"cuInit", false}, {"cuDriverGetVersion", false}, {"cuDeviceGetCount", false}, {"cuDeviceGet", false},
	{"cuDevicePrimaryCtxRetain", false}, {"cuDevicePrimaryCtxRelease_v2", false},
	{"cuCtxSetCurrent", false}, {"cuCtxGetCurrent", false}, {"cuCtxCreate_v2", true}, {"cuCtxDestroy_v2", true},
	{"cuMemAlloc_v2", false}, {"cuMemFree_v2", false}, {"cuMemAllocHost_v2", false}, {"cuMemFreeHost", false},
	{"cuMemHostRegister_v2", false}, {"cuMemHostUnregister", false},
	{"cuMemcpyHtoD_v2", false}, {"cuMemcpyDtoH_v2", false}, {"cuMemcpyHtoDAsync_v2", false},
	{"cuMemcpyDtoHAsync_v2", false}, {"cuMemcpyDtoDAsync_v2", false},
	{"cuStreamCreate", false}, {"cuStreamDestroy_v2", false}, {"cuStreamSynchronize", false}, {"cuStreamQuery", false},
	{"cuGetErrorName", false},
}

// openDriver takes the probe's entry points from the CUDA plugin's binding
// of the library (OMPALLOC_CUDA_LIBRARY, which run set to path). A process
// loads libcuda once, for the plugin and the probe alike: a second run in
// one process with another library is refused, naming both.
func openDriver(path string) (*driver, error) {
	b, err := cuda.Bound()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if b.Path() != path {
		return nil, fmt.Errorf("load %s: this process loaded %s already, and loads one libcuda", path, b.Path())
	}
	d := &driver{fn: map[string]uintptr{}}
	for _, s := range symbols {
		p, err := b.Sym(s.name)
		if err != nil {
			if s.optional {
				continue
			}
			return nil, err
		}
		d.fn[s.name] = p
	}
	return d, nil
}

// call calls a driver entry point and returns its CUresult.
func (d *driver) call(name string, args ...uintptr) int32 {
	f := d.fn[name]
	if f == 0 {
		return -1
	}
	r, _, _ := purego.SyscallN(f, args...)
	return int32(r)
}

// name is the driver's name for a result code.
func (d *driver) name(code int32) string {
	if code == -1 {
		return "not called: the entry point is missing"
	}
	var s uintptr
	if d.call("cuGetErrorName", uintptr(code), uintptr(unsafe.Pointer(&s))) == 0 && s != 0 {
		return cString(s)
	}
	return fmt.Sprintf("CUresult %d", code)
}

// try calls name and returns the result's name; ok is CUDA_SUCCESS.
func (d *driver) try(name string, args ...uintptr) (string, bool) {
	code := d.call(name, args...)
	return d.name(code), code == 0
}

// must calls name and returns an error naming the call and result on failure.
func (d *driver) must(name string, args ...uintptr) error {
	if code := d.call(name, args...); code != 0 {
		return fmt.Errorf("%s: %s", name, d.name(code))
	}
	return nil
}

func (d *driver) init(rep *Report) error {
	if err := d.must("cuInit", 0); err != nil {
		return err
	}
	var v, count int32
	if err := d.must("cuDriverGetVersion", uintptr(unsafe.Pointer(&v))); err != nil {
		return err
	}
	if err := d.must("cuDeviceGetCount", uintptr(unsafe.Pointer(&count))); err != nil {
		return err
	}
	rep.DriverVersion, rep.Devices = int(v), int(count)
	if count == 0 {
		return errors.New("no CUDA device")
	}
	if err := d.must("cuDeviceGet", uintptr(unsafe.Pointer(&d.dev0)), 0); err != nil {
		return err
	}
	if err := d.must("cuDevicePrimaryCtxRetain", uintptr(unsafe.Pointer(&d.ctx0)), uintptr(d.dev0)); err != nil {
		return err
	}
	d.restore()
	rep.GPUNode = gpuNode()
	return nil
}

// restore makes device 0's primary context current on the probe's thread.
func (d *driver) restore() { d.call("cuCtxSetCurrent", d.ctx0) }

func (d *driver) current() uintptr {
	var c uintptr
	d.call("cuCtxGetCurrent", uintptr(unsafe.Pointer(&c)))
	return c
}

// otherContext returns a context other than device 0's primary one, made
// current, and its release: device 1's primary context where there is a
// second GPU, else a context created on device 0 (cuCtxCreate).
func (d *driver) otherContext() (ctx uintptr, what string, release func(), err error) {
	var count int32
	d.call("cuDeviceGetCount", uintptr(unsafe.Pointer(&count)))
	if count >= 2 {
		var dev int32
		if err := d.must("cuDeviceGet", uintptr(unsafe.Pointer(&dev)), 1); err != nil {
			return 0, "", nil, err
		}
		if err := d.must("cuDevicePrimaryCtxRetain", uintptr(unsafe.Pointer(&ctx)), uintptr(dev)); err != nil {
			return 0, "", nil, err
		}
		d.call("cuCtxSetCurrent", ctx)
		return ctx, "device 1's primary context", func() {
			d.restore()
			d.call("cuDevicePrimaryCtxRelease_v2", uintptr(dev))
		}, nil
	}
	if d.fn["cuCtxCreate_v2"] == 0 {
		return 0, "", nil, errSkip("one GPU and no cuCtxCreate_v2 in this driver: no second context to ask with")
	}
	// cuCtxCreate pushes the new context on the thread's stack.
	if err := d.must("cuCtxCreate_v2", uintptr(unsafe.Pointer(&ctx)), 0, uintptr(d.dev0)); err != nil {
		return 0, "", nil, err
	}
	return ctx, "a second context created on device 0 (cuCtxCreate)", func() {
		d.call("cuCtxDestroy_v2", ctx)
		d.restore()
	}, nil
}

type errSkip string

func (e errSkip) Error() string { return string(e) }

func cString(p uintptr) string {
	var b strings.Builder
	for i := uintptr(0); i < 256; i++ {
		c := cmem.Bytes(p+i, 1)[0]
		if c == 0 {
			break
		}
		b.WriteByte(c)
	}
	return b.String()
}

// hostBuf maps n bytes of pageable memory, placed on node when node >= 0
// (MPOL_BIND, before the pages are faulted in), and touched.
func hostBuf(n uintptr, node int) (uintptr, func(), error) {
	lc, err := dl.C()
	if err != nil {
		return 0, nil, err
	}
	p, err := lc.Map(n)
	if err != nil {
		return 0, nil, err
	}
	if node >= 0 && numa.Supported() {
		if err := numa.Apply(p, []numa.Part{{Len: n, Mode: numa.ModeBind, Nodes: []int{node}}}); err != nil {
			_ = lc.Unmap(p, n)
			return 0, nil, err
		}
	}
	b := cmem.Bytes(p, n)
	for i := 0; i < len(b); i += 4096 {
		b[i] = byte(i >> 12)
	}
	return p, func() { _ = lc.Unmap(p, n) }, nil
}

// nodesOf says where the pages of [p, p+n) are (a sample of up to 64).
func nodesOf(p, n uintptr) string {
	if !numa.Supported() {
		return "unknown"
	}
	pages := max(n/4096, 1)
	step := max(pages/64, 1)
	var addrs []uintptr
	for i := uintptr(0); i < pages; i += step {
		addrs = append(addrs, p+i*4096)
	}
	got, err := numa.PageNodes(addrs)
	if err != nil {
		return "unknown: " + err.Error()
	}
	var nodes []int
	seen := map[int]bool{}
	for _, v := range got {
		if v >= 0 && !seen[v] {
			seen[v] = true
			nodes = append(nodes, v)
		}
	}
	if len(nodes) == 0 {
		return "unknown"
	}
	return numa.FormatList(nodes)
}
