package numa

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PCINode returns the NUMA node of the PCI device with the given bus id
// ("0000:41:00.0"; the 8-digit domain and upper-case hex that
// cuDeviceGetPCIBusId writes are accepted), read from
// /sys/bus/pci/devices/<id>/numa_node under root. ok is false when the
// kernel does not know (-1, a machine without NUMA) or the device is absent.
func PCINode(root, busID string) (node int, ok bool) {
	id, err := normalizeBusID(busID)
	if err != nil {
		return -1, false
	}
	b, err := os.ReadFile(filepath.Join(root, "sys/bus/pci/devices", id, "numa_node"))
	if err != nil {
		return -1, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1, false
	}
	return n, true
}

// normalizeBusID turns "00000000:41:00.0" into sysfs's "0000:41:00.0".
func normalizeBusID(s string) (string, error) {
	s = strings.ToLower(strings.TrimRight(strings.TrimSpace(s), "\x00"))
	parts := strings.Split(s, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return "", fmt.Errorf("PCI bus id %q: want domain:bus:device.function", s)
	}
	dom, err1 := strconv.ParseUint(parts[0], 16, 32)
	bus, err2 := strconv.ParseUint(parts[1], 16, 8)
	dev, fn, _ := strings.Cut(parts[2], ".")
	d, err3 := strconv.ParseUint(dev, 16, 8)
	f, err4 := strconv.ParseUint(fn, 16, 8)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || dom > 0xffff || d > 0x1f || f > 7 {
		return "", fmt.Errorf("PCI bus id %q: want domain:bus:device.function", s)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", dom, bus, d, f), nil
}
