package numa

import (
	"fmt"
	"syscall"
)

// HugeTLBPage is the hugetlb page size MapHugeTLB maps: 2 MiB, the size
// x86-64 and arm64 with 4 KiB base pages both have.
const HugeTLBPage = 2 << 20

const (
	mapHugeTLB2MB = 0x40000 | 21<<26 // MAP_HUGETLB | MAP_HUGE_2MB (log2 of the size << MAP_HUGE_SHIFT)
	mapNoReserve  = 0x4000           // MAP_NORESERVE
)

// MapHugeTLB maps n bytes (a multiple of 2 MiB) of private anonymous 2 MiB
// hugetlb pages aligned to align (a multiple of 2 MiB). The kernel reserves
// the pages at mmap, so ENOMEM here, never a SIGBUS at the first touch, is
// what a pool without enough free pages gives.
//
// The kernel aligns hugetlb mappings to 2 MiB only. Over-mapping and
// trimming would reserve huge pages for the slack too, failing when the
// pool holds just enough, so an aligned hole is found first with an
// ordinary PROT_NONE probe (reserving nothing), and the hugetlb mapping is
// asked for there as a hint. No MAP_FIXED: a failed MAP_FIXED mmap may
// leave a hole another thread could map into before it is unmapped. Only
// when the hint is not honoured (another mapping took the hole) is it
// over-mapped and trimmed, in 2 MiB units.
func MapHugeTLB(n, align uintptr) (uintptr, error) {
	if n == 0 || n%HugeTLBPage != 0 || align%HugeTLBPage != 0 {
		return 0, fmt.Errorf("mmap MAP_HUGETLB: %d bytes aligned to %d: not whole 2 MiB pages", n, align)
	}
	probe, err := sysMmap(0, n+align, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|mapNoReserve)
	if err != nil {
		return 0, fmt.Errorf("mmap %d bytes (address probe): %w", n+align, err)
	}
	hint := (probe + align - 1) &^ (align - 1)
	_ = sysMunmap(probe, n+align)
	const flags = syscall.MAP_PRIVATE | syscall.MAP_ANON | mapHugeTLB2MB
	p, err := sysMmap(hint, n, syscall.PROT_READ|syscall.PROT_WRITE, flags)
	if err != nil {
		return 0, fmt.Errorf("mmap MAP_HUGETLB %d bytes: %w", n, err)
	}
	if p&(align-1) == 0 {
		return p, nil
	}
	_ = sysMunmap(p, n)
	slack := align - HugeTLBPage // the kernel gives 2 MiB alignment at least
	p, err = sysMmap(0, n+slack, syscall.PROT_READ|syscall.PROT_WRITE, flags)
	if err != nil {
		return 0, fmt.Errorf("mmap MAP_HUGETLB %d bytes: %w", n+slack, err)
	}
	// A trim that fails (munmap's ENOMEM at vm.max_map_count: it splits the
	// mapping) unmaps what is left whole instead, so nothing stays mapped.
	end := p + n + slack
	a := (p + align - 1) &^ (align - 1)
	if head := a - p; head > 0 {
		if err := sysMunmap(p, head); err != nil {
			_ = sysMunmap(p, end-p)
			return 0, fmt.Errorf("munmap %#x+%d (aligning a hugetlb mapping, unmapped again): %w", p, head, err)
		}
	}
	if tail := end - (a + n); tail > 0 {
		if err := sysMunmap(a+n, tail); err != nil {
			_ = sysMunmap(a, end-a)
			return 0, fmt.Errorf("munmap %#x+%d (aligning a hugetlb mapping, unmapped again): %w", a+n, tail, err)
		}
	}
	return a, nil
}

func sysMmap(addr, n uintptr, prot, flags int) (uintptr, error) {
	r, _, e := syscall.Syscall6(syscall.SYS_MMAP, addr, n, uintptr(prot), uintptr(flags), ^uintptr(0), 0)
	if e != 0 {
		return 0, e
	}
	return r, nil
}

func sysMunmap(p, n uintptr) error {
	if _, _, e := syscall.Syscall(syscall.SYS_MUNMAP, p, n, 0); e != 0 {
		return e
	}
	return nil
}
