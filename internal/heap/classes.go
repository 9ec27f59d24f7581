package heap

// Size classes for small blocks. A slot holds the 16-byte header, any
// alignment padding and the user's bytes. Classes are 16-byte steps up to
// 128, then four steps per power of two (at most 25% waste, 12.5% typical).
// Every class from 256 up is a multiple of 64, so 64-byte aligned requests
// (the common cache-line case) fit the same classes.
const (
	minAlign   = 16
	hdrSize    = 16
	maxSmall   = 32 << 10 // largest slot size
	numClasses = 8 + 4*8  // 16..128, then 4 per doubling up to 32 KiB
	divShift   = 40       // exact for offsets below 2^40/32 KiB = 32 MiB
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
	i := 0
	for s := uintptr(16); s <= 128; s += 16 {
		classSize[i] = s
		i++
	}
	for base := uintptr(128); base < maxSmall; base *= 2 {
		step := base / 4
		for k := uintptr(1); k <= 4; k++ {
			classSize[i] = base + k*step
			i++
		}
	}
	if i != numClasses || classSize[numClasses-1] != maxSmall {
		panic("heap: size class table is inconsistent")
	}
	c := 0
	for n := range smallIndex {
		for classSize[c] < uintptr(n)*minAlign {
			c++
		}
		smallIndex[n] = uint8(c)
	}
	for c, s := range classSize {
		pages := (8*s + pageSize - 1) / pageSize // at least 8 slots per span
		classPages[c] = pages
		classCap[c] = int32(min(256, max(8, 32<<10/s)))
		classDivMul[c] = uint64((1<<divShift + s - 1) / s)
	}
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
