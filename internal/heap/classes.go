package heap

import "slices"

// Size classes for small blocks. A slot holds the 8-byte header, any
// alignment padding and the user's bytes; slots start 8 bytes past a 16-byte
// boundary, so that the user pointer after the header is 16-aligned.
// Classes are 16-byte steps up to 4080 bytes (a block costs its size plus
// the header rounded to 16, as in glibc, at every size up to 4 KiB), then
// four steps per power of two (at most 25% waste, 12.5% typical), plus one
// class of each power of two from 4 KiB to 16 KiB plus 16, so that a
// power-of-two request (the commonest buffer size) costs its size and 16
// bytes, as in glibc, instead of the next step. (There is no 4096-byte
// class: its slots would leave almost a slot unused at the end of every
// span, since slots start 8 bytes in; requests of 4073-4088 bytes take the
// 4112-byte one.)
const (
	minAlign   = 16
	hdrSize    = 8             // small blocks' header; also where slots start past a 16-byte boundary
	descSize   = 16            // what a large block's footprint counts for its descriptor (in its span)
	maxSmall   = 32 << 10      // largest slot size
	numClasses = 255 + 4*3 + 3 // 16..4080 by 16, 4 per doubling up to 32 KiB, 4 KiB+16..16 KiB+16
	divShift   = 40            // exact for offsets below 2^40/32 KiB = 32 MiB
	maxSpanPgs = 16            // pages a small span may take to waste little of its tail
)

var (
	classSize  [numClasses]uintptr
	classPages [numClasses]uintptr // pages per span of the class
	// classMinPages: the fewest pages a span may have (one slot: a page for
	// every small class), used when classPages cannot be had (a pinned
	// heap whose limit leaves less than a chunk)
	classMinPages [numClasses]uintptr
	classCap      [numClasses]int32 // per-P cache capacity (slots)
	// classDivMul[c] turns a division by classSize[c] into a multiply:
	// o/size == o*m>>divShift for every offset o within a span of the class
	// (checked by TestClassDivMul); a divide costs several times more on
	// Free's path.
	classDivMul [numClasses]uint64
	smallIndex  [maxSmall/minAlign + 1]uint16
)

func init() {
	var sizes []uintptr
	for s := uintptr(16); s < 4096; s += 16 {
		sizes = append(sizes, s)
	}
	for base := uintptr(4096); base < maxSmall; base *= 2 {
		step := base / 4
		for k := uintptr(1); k <= 4; k++ {
			sizes = append(sizes, base+k*step)
		}
	}
	for p := uintptr(4096); p <= 16<<10; p *= 2 {
		sizes = append(sizes, p+16)
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
		smallIndex[n] = uint16(c)
	}
	for c, s := range classSize {
		classPages[c] = spanPages(s)
		classMinPages[c] = (s + hdrSize + pageSize - 1) / pageSize // one slot: a page for every small class
		classCap[c] = int32(min(256, max(8, 32<<10/s)))
		classDivMul[c] = uint64((1<<divShift + s - 1) / s)
	}
}

// spanPages picks the pages of a span of slot size s: from the least below,
// the fewest pages (up to maxSpanPgs) whose unusable tail costs each slot at
// most a byte, else the count with the least tail per slot. (A 4112-byte
// slot takes 15 pages: with fewer, the tail would add up to 257 bytes to
// each 4 KiB block.)
func spanPages(s uintptr) uintptr {
	// At least 8 slots, and 256 where 4 pages hold them: the span's own
	// bookkeeping (a Go struct) is then a fraction of a byte per block.
	least := max((8*s+pageSize-1)/pageSize, min((256*s+pageSize-1)/pageSize, 4))
	best, bestTail, bestSlots := least, ^uintptr(0), uintptr(1)
	for n := least; n <= max(least, maxSpanPgs); n++ {
		bytes := n*pageSize - hdrSize // the first slot starts hdrSize in
		slots, tail := bytes/s, bytes%s
		if tail+hdrSize <= slots { // at most a byte per slot unused, the 8 bytes the span starts in included
			return n
		}
		if tail*bestSlots < bestTail*slots {
			best, bestTail, bestSlots = n, tail, slots
		}
	}
	return best
}

// offFor is where the user pointer sits in a slot for alignment align (a
// power of two ≥ 16): right after the header, or, aligned further, at the
// first align boundary, which is align-8 into a slot since slots start 8
// past one (and classFor picks classes that are multiples of align).
func offFor(align uintptr) uintptr {
	if align <= minAlign {
		return hdrSize
	}
	return align - hdrSize
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
