package heap

import "slices"

// Size classes for small blocks. A slot holds the 16-byte header, any
// alignment padding and the user's bytes. Classes are 16-byte steps up to
// 128, then four steps per power of two (at most 25% waste, 12.5% typical),
// plus one class of each power of two from 256 to 16 KiB plus the header,
// so that a power-of-two request (the commonest buffer size) costs its size
// and 16 bytes, as in glibc, instead of the next step. Every other class
// from 256 up is a multiple of 64, so 64-byte aligned requests (the common
// cache-line case) fit the same classes.
const (
	minAlign   = 16
	hdrSize    = 16
	maxSmall   = 32 << 10    // largest slot size
	numClasses = 8 + 4*8 + 7 // 16..128, 4 per doubling up to 32 KiB, 256+16..16 KiB+16
	divShift   = 40          // exact for offsets below 2^40/32 KiB = 32 MiB
	maxSpanPgs = 16          // pages a small span may take to waste little of its tail
)

var (
	classSize  [numClasses]uintptr
	classPages [numClasses]uintptr // pages per span of the class
	classCap   [numClasses]int32   // per-P cache capacity (slots)
	// classDivMul[c] turns a division by classSize[c] into a multiply:
	// o/size == o*m>>divShift for every offset o within a span of the class
	// (checked by TestClassDivMul); a divide costs several times more on
	// Free's path.
	classDivMul [numClasses]uint64
	smallIndex  [maxSmall/minAlign + 1]uint8
)

func init() {
	var sizes []uintptr
	for s := uintptr(16); s <= 128; s += 16 {
		sizes = append(sizes, s)
	}
	for base := uintptr(128); base < maxSmall; base *= 2 {
		step := base / 4
		for k := uintptr(1); k <= 4; k++ {
			sizes = append(sizes, base+k*step)
		}
	}
	for p := uintptr(256); p <= 16<<10; p *= 2 {
		sizes = append(sizes, p+hdrSize)
	}
	slices.Sort(sizes)
	if len(sizes) != numClasses || sizes[numClasses-1] != maxSmall {
		panic("heap: size class table is inconsistent")
	}
	copy(classSize[:], sizes)
	c := 0
	for n := range smallIndex {
		for classSize[c] < uintptr(n)*minAlign {
			c++
		}
		smallIndex[n] = uint8(c)
	}
	for c, s := range classSize {
		classPages[c] = spanPages(s)
		classCap[c] = int32(min(256, max(8, 32<<10/s)))
		classDivMul[c] = uint64((1<<divShift + s - 1) / s)
	}
}

// spanPages picks the pages of a span of slot size s: at least 8 slots, and
// the fewest pages (up to maxSpanPgs) whose unusable tail costs each slot at
// most a byte, else the count with the least tail per slot. (A 4112-byte
// slot takes 15 pages: with fewer, the tail would add up to 257 bytes to
// each 4 KiB block.)
func spanPages(s uintptr) uintptr {
	least := (8*s + pageSize - 1) / pageSize
	best, bestWaste := least, ^uintptr(0)
	for n := least; n <= max(least, maxSpanPgs); n++ {
		bytes := n * pageSize
		perSlot := bytes % s / (bytes / s)
		if perSlot <= 1 {
			return n
		}
		if perSlot < bestWaste {
			best, bestWaste = n, perSlot
		}
	}
	return best
}

// classFor returns the smallest class whose slots hold need bytes and are
// align-aligned (align a power of two ≥ 16), or -1 if none.
func classFor(need, align uintptr) int {
	if need > maxSmall {
		return -1
	}
	c := int(smallIndex[(need+minAlign-1)/minAlign])
	for ; c < numClasses; c++ {
		if classSize[c]&(align-1) == 0 { // a mask, not %: align is a variable, and a divide is slow
			return c
		}
	}
	return -1
}
