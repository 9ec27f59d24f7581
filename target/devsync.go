package target

import (
	"context"
	"errors"
	"fmt"
)

// Synchronize waits until the work issued so far on every queue of d has
// completed (torch.cuda.synchronize(device) and cudaDeviceSynchronize, for
// the work issued through ompalloc: the queues of d, not other code's
// streams in the same context), and releases what those queues held. A
// context that can be cancelled is polled, queue by queue, as
// Queue.Synchronize does: cancellation returns ctx.Err() and leaves
// every queue usable with its work running. A queue closed meanwhile has
// nothing left to wait for.
func (d *Device) Synchronize(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("device %d: synchronize: a nil context: %w", d.ID, ErrInvalidArgument)
	}
	if err := d.usable(); err != nil {
		return err
	}
	d.qmu.Lock()
	qs := make([]*Queue, 0, len(d.queues))
	for q := range d.queues {
		qs = append(qs, q)
	}
	d.qmu.Unlock()
	for _, q := range qs {
		err := q.Synchronize(ctx)
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, ErrQueueClosed) {
			return fmt.Errorf("device %d: synchronize: %w", d.ID, err)
		}
	}
	return nil
}
