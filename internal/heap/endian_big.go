//go:build armbe || arm64be || m68k || mips || mips64 || mips64p32 || ppc || ppc64 || s390 || s390x || shbe || sparc || sparc64

package heap

// sizeShift is where a header's requested size sits in the header read
// as one uint64 (tag in the high half, meta in the low half here).
const sizeShift = 0
