// Package array stands in for github.com/apache/arrow-go/v18/arrow/array
// (see ../../../README.md): a Float64 builder whose value buffer comes from
// the allocator it is given and grows with Reallocate, as Arrow's does.
package array

import (
	"encoding/binary"
	"math"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Float64Builder appends float64 values into an allocator's buffer.
type Float64Builder struct {
	mem memory.Allocator
	buf []byte
	n   int
}

// NewFloat64Builder returns a builder allocating through mem.
func NewFloat64Builder(mem memory.Allocator) *Float64Builder {
	return &Float64Builder{mem: mem}
}

// Append adds v.
func (b *Float64Builder) Append(v float64) {
	if need := (b.n + 1) * 8; need > len(b.buf) {
		b.buf = b.mem.Reallocate(max(64, 2*len(b.buf)), b.buf)
	}
	binary.LittleEndian.PutUint64(b.buf[b.n*8:], math.Float64bits(v))
	b.n++
}

// NewFloat64Array hands the values to a new array and resets the builder.
func (b *Float64Builder) NewFloat64Array() *Float64 {
	a := &Float64{mem: b.mem, buf: b.buf, n: b.n}
	b.buf, b.n = nil, 0
	return a
}

// Release frees what the builder still holds.
func (b *Float64Builder) Release() {
	if b.buf != nil {
		b.mem.Free(b.buf)
		b.buf, b.n = nil, 0
	}
}

// Float64 is an array of float64 values.
type Float64 struct {
	mem memory.Allocator
	buf []byte
	n   int
}

// Len returns the number of values.
func (a *Float64) Len() int { return a.n }

// Value returns value i.
func (a *Float64) Value(i int) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64(a.buf[i*8:]))
}

// Release frees the array's buffer.
func (a *Float64) Release() {
	if a.buf != nil {
		a.mem.Free(a.buf)
		a.buf = nil
	}
}
