// Command ompalloc shows what the ompalloc runtime sees on this machine and
// measures how fast it is here.
//
//	go run ./cmd/ompalloc info            # drivers, devices, memory spaces, allocators, limits
//	go run ./cmd/ompalloc info --json
//	go run ./cmd/ompalloc bench           # 4-7 s without a GPU on an idle 2-core machine (README)
//	go run ./cmd/ompalloc bench --json --svg bench.svg --time 100ms --sizes 64,4K,1M
//
// Exit status: 0 success (also on a machine without GPUs), 1 when something
// the command was asked to do failed (a file that cannot be written), 2 for
// a bad command line (the usage goes to stderr), 3 for an internal error.
//
// # info
//
// Lists each device plugin's driver (the library loaded or why none was,
// its version, the init result by the driver's own name), the devices in
// OpenMP numbering (accelerators first, then the host as the initial
// device) with memory, compute capability or gfx name, NUMA node and the
// state of the device's pinned registry, the memory spaces and what backs
// each, the predefined allocators with their memory space and traits, the
// OMP_ALLOCATOR in force (its value, the default allocator it gave, or the
// warning that rejected it), RLIMIT_MEMLOCK, VmLck (Linux), the limit on
// bytes pinned allocators may lock, and the pages pinned chunks get (the
// OMPALLOC_HUGEPAGES mode, bytes in hugetlb pages, fallbacks, the system's
// 2 MiB hugetlb pool).
//
// With --json, stdout is one JSON object (schema "ompalloc-info/1"; fields
// are only added within a schema version):
//
//	schema, version, go, os, arch: strings; cpus: number
//	drivers[]:    {plugin, library ("" none), version, init, usable, error?}
//	num_devices, initial_device, default_device: numbers
//	devices[]:    {number, plugin, initial, default, name, vendor, memory_bytes,
//	               capability, numa_node (-1 unknown),
//	               registry: {entries, locked_bytes, external_bytes, registered_bytes, hits, misses}}
//	numa:         {synthetic, note, nodes[] {id, cpus, memory_only, mem_total_bytes,
//	               mem_free_bytes, distances[], tier, read_bandwidth_mbps, read_latency_ns,
//	               huge_pages_total, note}, huge_page_sizes[], thp, high_bw_nodes[],
//	               high_bw_why, large_cap_nodes[], large_cap_why, policies}
//	memspaces[]:  {handle, name, kind (host, target-host, ...), memory, backed_by,
//	               nodes[] (NUMA nodes of a host memory space), nodes_why}
//	allocators[]: {handle, name, memspace, traits (OMP_ALLOCATOR syntax, "defaults"), default}
//	omp_allocator: {set, value, resolved, handle, memspace, traits, warning?}
//	memlock:      {soft_bytes, hard_bytes (-1 unlimited or n/a), soft, hard ("unlimited", "8 MiB", "n/a"),
//	               vmlck_bytes (-1 n/a), vmlck, cap_ipc_lock}
//	pinned:       {limit_bytes (0 none), used_bytes, limit, env (OMPALLOC_PINNED_LIMIT as set),
//	               source (where the limit came from: RLIMIT_MEMLOCK, the memory cgroup,
//	               half of RAM, the variable), warning (a limit below one 4 MiB chunk),
//	               huge_pages: {mode (thp, off, hugetlb), env (OMPALLOC_HUGEPAGES as set),
//	               hugetlb_bytes, hugetlb_fallbacks, pool (a 2 MiB hugetlb pool exists),
//	               pool_total, pool_free, pool_available (free, not reserved)}}
//	errors[]?:    parts of the report that could not be read
//
// # bench
//
// Measures, per case, with adaptive iteration counts bounded by --time
// (default 200ms per case):
//
//	alloc_free    alloc+free of one block on omp_default_mem_alloc, an alignment=64
//	              allocator and a pinned=true allocator (null_fb), 64 B .. 64 MiB
//	lock_size     lock+unlock of a range not yet locked, through the host device
//	              (mlock) and, with a GPU, through its driver: each pair is a driver call
//	lock_regions  with 100 / 10,000 / 100,000 small ranges locked: lock+unlock of a
//	              contained sub-range (a registry hit) and a lookup
//	partition_alloc_free  alloc+free of 64 B on allocators with each partition trait
//	              (environment, nearest, blocked, interleaved): the same cost, policy per chunk
//	pin_huge      pinning 1 GiB (the largest --sizes when given): map, mlock, munlock,
//	              unmap, with 4 KiB pages ("4k"), with MADV_HUGEPAGE first ("thp") and
//	              in 2 MiB hugetlb pages ("hugetlb", rounded up to whole pages) when the
//	              system's pool has enough free; bench never resizes it: "skipped"
//	              says how to
//	h2d, d2h      with a GPU: synchronous copy bandwidth, 4 KiB .. 1 GiB, from pageable,
//	              pinned-allocated and registered (LockMem) host memory and, on CUDA,
//	              the driver's own peak: a cuMemAllocHost buffer copied with
//	              cuMemcpy*Async on a stream of its own; the others show ours/peak
//	small_copy    with a GPU: submit on a queue + synchronize, 64 B .. 64 KiB, staged
//	              through the pinned staging pool, unstaged, and from pinned memory
//	device_alloc  with a GPU: alloc+free of 1 MiB of device memory through the
//	              device's pool (PoolAlloc/PoolFree: CUDA's stream-ordered allocator
//	              where the GPU has memory pools, else a size-class cache; the JSON's
//	              device.device_pool says which) and through the driver
//	              (cuMemAlloc+cuMemFree)
//
// --sizes replaces the sizes of every group (small_copy keeps those up to
// 64 KiB); --regions the region counts; --device N picks the device of the
// transfer groups (the host's number measures host memcpy, useful to try
// them on a machine without a GPU). A progress bar is drawn on stderr only
// when stderr is a terminal. --svg FILE writes a standalone SVG chart: one
// log-log panel per group, one line per series.
//
// With --json, stdout is one JSON object (schema "ompalloc-bench/1"):
//
//	schema, version, go, os, arch: strings; cpus: number
//	time_per_case (a Go duration), time_per_case_ns, elapsed_ns: the whole run
//	device: {number, plugin, name} of the transfer groups, or null
//	results[]: {group, series, size_bytes?, regions?, ns_per_op, gb_per_s? (h2d, d2h),
//	            of_peak? (h2d, d2h: gb_per_s over the driver peak's at that size),
//	            iterations, error? (then ns_per_op is 0)}
//	skipped[]: {group, reason}
//	goals[]:   {goal, status ("met", "missed", "unmeasured"), detail}: from 64 MiB
//	           on, pinned and registered copies reach 95% of the driver peak; staged
//	           small copies beat unstaged ones
package main
