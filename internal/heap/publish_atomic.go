//go:build !amd64 || race

package heap

import "sync/atomic"

// publish stores a span state that readers load atomically (see
// publish_tso.go). Elsewhere than amd64 the atomic store is already a
// release store (arm64: STLR) and costs little.
func publish(state *atomic.Uint32, v uint32) { state.Store(v) }
