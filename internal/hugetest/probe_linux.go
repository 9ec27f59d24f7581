package hugetest

import "syscall"

// probe maps and unmaps one 2 MiB hugetlb page with a plain mmap, apart
// from the code under test.
func probe() error {
	const flags = syscall.MAP_PRIVATE | syscall.MAP_ANON | 0x40000 | 21<<26 // MAP_HUGETLB | MAP_HUGE_2MB
	p, _, e := syscall.Syscall6(syscall.SYS_MMAP, 0, 2<<20, syscall.PROT_READ|syscall.PROT_WRITE, flags, ^uintptr(0), 0)
	if e != 0 {
		return e
	}
	_, _, _ = syscall.Syscall(syscall.SYS_MUNMAP, p, 2<<20, 0)
	return nil
}
