// Package traits validates OpenMP allocator traits.
//
// Keys and values carry the numbers of LLVM's omp.h (OpenMP 6.0 numbering:
// omp_atv_all is 19). FromList checks a trait list the way omp_init_allocator
// must, and resolves it into a Set holding every trait, defaults included.
// Key.ParseValue and Key.FormatValue read and write a value as
// OMP_ALLOCATOR spells it. Nothing here touches memory; the allocation
// engine (package alloc) consumes a Set.
//
// # Allowed values (OpenMP 6.0)
//
//	sync_hint         contended (default), uncontended, serialized, private
//	alignment         a power of two; default 1 (the engine raises it to 16)
//	access            all (default, as LLVM), memspace, device, cgroup, pteam, thread
//	pool_size         bytes > 0; default none (no quota)
//	fallback          default_mem_fb (default), null_fb, abort_fb, allocator_fb
//	fb_data           an allocator handle; needed by allocator_fb, ignored otherwise
//	pinned            true, false (default)
//	partition         environment (default), nearest, blocked, interleaved
//	pin_device        a device number >= 0; default: the default device
//	preferred_device  a device number >= 0; default: none
//	device_access     all, memspace (default), device
//	target_access     single (default), multiple
//	atomic_scope      all, device (default)
//	part_size         bytes > 0; default: the implementation's choice
//
// omp_atv_default is accepted for every key and selects its default. A key
// given twice: the last one wins (LLVM and libgomp do the same). Anything
// else is an error wrapping ErrInvalidTrait that names the key and value; the
// kmp layer turns it into the null allocator plus a warning.
//
// Checks that need the allocator table — fb_data naming a live allocator,
// fallback cycles — belong to package alloc.
//
// # OMP_ALLOCATOR
//
// Package alloc reads OMP_ALLOCATOR (OpenMP 5.1) at first use:
//
//	<predefined allocator> | <memory space> | <memory space>:<key>=<value>[,<key>=<value>...]
//
// with the keys sync_hint, alignment, access, pool_size, fallback, fb_data,
// pinned and partition, values as ParseValue reads them. Where LLVM skips a
// bad trait and keeps the rest, the whole value is rejected: one warning
// names OMP_ALLOCATOR and what was wrong, and omp_default_mem_alloc stays.
package traits
