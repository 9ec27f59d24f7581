package main

import (
	"time"

	"github.com/ompalloc/ompalloc/target"
)

// devAllocSize is the block of the device_alloc group: 1 MiB, a typical
// tensor, the size the comparison names.
const devAllocSize = 1 << 20

// deviceAllocSection measures device alloc+free of 1 MiB through the
// device's caching pool (target.Device.PoolAlloc/PoolFree: on CUDA with
// memory pools the driver's stream-ordered allocator, else the size-class
// cache) against the driver's own (Device.Alloc/Free: cuMemAlloc+cuMemFree,
// which may synchronize the device; hsa_amd_memory_pool_allocate+free), in
// one run, and says in rep which pool served it.
func deviceAllocSection(d *target.Device, rep *BenchDevice) *benchSection {
	s := &benchSection{}
	s.teardown = func() { d.TrimPool(0) }
	for _, series := range []string{"pool", "driver"} {
		s.cases = append(s.cases, &benchCase{group: "device_alloc", series: series, size: devAllocSize,
			run: func(budget time.Duration) (float64, int, error) {
				if series == "pool" {
					defer func() { rep.DevicePool = devicePoolKind(d) }()
				}
				return measure(budget, func(n int) error {
					for range n {
						if series == "pool" {
							p, err := d.PoolAlloc(devAllocSize, nil)
							if err != nil {
								return err
							}
							if err := d.PoolFree(p, nil); err != nil {
								return err
							}
							continue
						}
						p, err := d.Alloc(target.MemDevice, devAllocSize)
						if err != nil {
							return err
						}
						if err := d.Free(target.MemDevice, p); err != nil {
							return err
						}
					}
					return nil
				})
			}})
	}
	return s
}

// devicePoolKind names what serves d's pool (read after an allocation).
func devicePoolKind(d *target.Device) string {
	if d.MemoryStats().Pool.DriverPool {
		return "driver"
	}
	return "size_class"
}
