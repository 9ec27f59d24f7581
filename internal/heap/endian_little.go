//go:build 386 || amd64 || amd64p32 || alpha || arm || arm64 || loong64 || mipsle || mips64le || mips64p32le || nios2 || ppc64le || riscv || riscv64 || sh || wasm

package heap

// sizeShift is where a header's requested size sits in the header read
// as one uint64 (tag in the low half, meta in the high half here).
const sizeShift = 32
