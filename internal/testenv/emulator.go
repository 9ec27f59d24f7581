package testenv

import (
	"fmt"
	"os"
	"strings"
)

// Emulated reports whether the process runs under an emulator such as
// qemu-user (CI's arm64 stage), and why: qemu answers /proc/self/maps with
// the guest's mappings alone while /proc/thread-self/maps is the kernel's
// list, so the kernel listing many more mappings means the emulator's own
// memory (its translation cache) is the process's too and moves VmRSS and
// VmLck by megabytes. Tests of those figures skip there, saying why.
func Emulated() (why string, ok bool) {
	self, err1 := os.ReadFile("/proc/self/maps")
	kernel, err2 := os.ReadFile("/proc/thread-self/maps")
	if err1 != nil || err2 != nil {
		return "", false
	}
	s, k := strings.Count(string(self), "\n"), strings.Count(string(kernel), "\n")
	if k > s+16 {
		return fmt.Sprintf("under an emulator (the kernel lists %d mappings, /proc/self/maps shows %d): its own memory counts in the process's", k, s), true
	}
	return "", false
}
