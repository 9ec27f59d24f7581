package pinreg_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/ompalloc/ompalloc/internal/pinreg"
)

// hostDevice stands in for a device plugin: it "locks" by returning the host
// address as the device address.
type hostDevice struct{ locks, unlocks int }

func (d *hostDevice) LockHost(p, n uintptr) (uintptr, error) { d.locks++; return p, nil }
func (d *hostDevice) UnlockHost(uintptr) error               { d.unlocks++; return nil }
func (d *hostDevice) ExternalLock(uintptr, uintptr) (pinreg.External, bool, error) {
	return pinreg.External{}, false, nil
}

func Example() {
	dev := &hostDevice{}
	r := pinreg.New(dev)
	const buf = 0x10000 // any host address: the registry never dereferences it

	r.Lock(buf, 8192)               // locks through the device
	d, _ := r.Lock(buf+100, 50)     // inside: one more reference, no driver call
	_, err := r.Lock(buf+8000, 500) // runs past the end: refused, nothing changed
	fmt.Printf("dev %#x, overlap: %v\n", d, errors.Is(err, pinreg.ErrOverlap))

	r.Dump(os.Stdout)
	r.Unlock(buf + 120) // any interior pointer
	r.Unlock(buf)       // the last reference unlocks
	fmt.Println("entries:", r.Len(), "driver locks:", dev.locks, "unlocks:", dev.unlocks)
	// Output:
	// dev 0x10064, overlap: true
	// [0x10000, 0x12000) size=8192 dev=0x10000 kind=locked refs=2 mapped=0
	// entries: 0 driver locks: 1 unlocks: 1
}
