// Package numatest gives tests the PCI part of a sysfs fixture of
// internal/numa/testdata under the names the kernel uses. sysfs names a
// PCI device's directory by its bus id, "0000:41:00.0", and a Go module
// zip refuses ':' in a file path (golang.org/x/mod/module.CheckFilePath:
// `go mod download` of the module failed with "malformed file path ...
// invalid char ':'"), so the fixtures keep those directories as
// "0000_41_00.0" and PCIRoot lays them out under their real names.
package numatest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// PCIRoot returns a temporary root holding fixture's
// sys/bus/pci/devices/<bus id>/numa_node files, each directory named with
// ':' where the fixture has '_', for numa.PCINode(root, id).
func PCIRoot(tb testing.TB, fixture string) string {
	tb.Helper()
	root := tb.TempDir()
	const devices = "sys/bus/pci/devices"
	ents, err := os.ReadDir(filepath.Join(fixture, devices))
	if err != nil {
		tb.Fatalf("numatest: %v", err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(fixture, devices, e.Name(), "numa_node"))
		if err != nil {
			tb.Fatalf("numatest: %v", err)
		}
		dir := filepath.Join(root, devices, strings.ReplaceAll(e.Name(), "_", ":"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tb.Fatalf("numatest: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), b, 0o644); err != nil {
			tb.Fatalf("numatest: %v", err)
		}
	}
	return root
}
