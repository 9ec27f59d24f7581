package alloc

import "github.com/ompalloc/ompalloc/traits"

type config struct {
	traits  []traits.Trait
	fbAlloc *Allocator
}

// Option sets one trait of a new allocator.
type Option func(*config)

func trait(k traits.Key, v uintptr) Option {
	return func(c *config) { c.traits = append(c.traits, traits.Trait{Key: k, Value: v}) }
}

// WithAlignment aligns every block to a (a power of two).
func WithAlignment(a uintptr) Option { return trait(traits.Alignment, a) }

// WithPoolSize caps the bytes the allocator may hold at once, counting each
// block's whole footprint.
func WithPoolSize(n uintptr) Option { return trait(traits.PoolSize, n) }

// WithPinned page-locks the allocator's memory through the pin device.
func WithPinned(p bool) Option {
	v := traits.False
	if p {
		v = traits.True
	}
	return trait(traits.Pinned, v)
}

// WithPinDevice chooses the device that pins the memory (default: the
// default device).
func WithPinDevice(dev int) Option { return trait(traits.PinDevice, uintptr(dev)) }

// WithFallback sets what happens when an allocation cannot be served:
// traits.NullFb, traits.AbortFb or traits.DefaultMemFb. For another
// allocator, use WithFallbackAllocator.
func WithFallback(fb traits.Value) Option { return trait(traits.Fallback, fb) }

// WithFallbackAllocator retries failed allocations on fb.
func WithFallbackAllocator(fb *Allocator) Option {
	return func(c *config) {
		c.traits = append(c.traits, traits.Trait{Key: traits.Fallback, Value: traits.AllocatorFb})
		c.fbAlloc = fb
	}
}

// WithTrait sets any trait by key, as omp_alloctrait_t does.
func WithTrait(k traits.Key, v uintptr) Option { return trait(k, v) }
