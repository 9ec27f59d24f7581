//go:build race

package heap

import "sync/atomic"

// addMark is an atomic add in race builds (never called there with
// pcpu.HasBarrier false; Enter and Exit use atomic adds).
func addMark(p *int64, d int64) { atomic.AddInt64(p, d) }
