// Package gpucode is a user's GPU code, as a tensor library outside
// ompalloc would write it, with its tests on ompalloc's fake GPU drivers
// (gputest): a module of its own (examples/ecosystem), testing in CI
// without a GPU.
package gpucode

import (
	"context"
	"errors"
	"fmt"

	"github.com/ompalloc/ompalloc/target"
)

// RoundTrip uploads xs to device memory of d on a queue of its own, copies
// it to a second device buffer there (a kernel's stand-in), downloads the
// result and releases everything, whatever fails.
func RoundTrip(d *target.Device, xs []float32) (out []float32, err error) {
	q, err := d.NewQueue()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, q.Close()) }()
	in, err := target.AllocArray[float32](d, target.MemDevice, len(xs))
	if err != nil {
		return nil, fmt.Errorf("gpucode: input: %w", err)
	}
	defer func() { err = errors.Join(err, in.Free()) }()
	res, err := target.AllocArray[float32](d, target.MemDevice, len(xs))
	if err != nil {
		return nil, fmt.Errorf("gpucode: result: %w", err)
	}
	defer func() { err = errors.Join(err, res.Free()) }()
	if err := target.CopyToDevice(in, xs, q); err != nil {
		return nil, err
	}
	if err := target.CopyArray(res, in, q); err != nil {
		return nil, err
	}
	out = make([]float32, len(xs))
	if err := target.CopyFromDevice(out, res, q); err != nil {
		return nil, err
	}
	return out, q.Synchronize(context.Background())
}
