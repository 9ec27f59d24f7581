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
//
// A pinned allocator made with New never hands out unpinned memory unless
// asked to: without a WithFallback or WithFallbackAllocator option its
// fallback is traits.NullFb, so a pin that fails (the pinned-bytes limit,
// RLIMIT_MEMLOCK, vm.max_map_count, a driver error) is an error matching
// ErrPinFailed. WithFallback(traits.DefaultMemFb) asks for plain memory
// instead (Stats().Fallbacks counts it). NewFromTraits and kmp keep
// OpenMP's default, default_mem_fb; kmp warns once per allocator when a
// failed pin first sends a block to the fallback.
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

// pinnedWithoutFallback reports whether the options ask for pinned memory
// and say nothing about the fallback.
func (c *config) pinnedWithoutFallback() bool {
	pinned := false
	for _, t := range c.traits {
		switch t.Key {
		case traits.Fallback:
			return false
		case traits.Pinned:
			pinned = t.Value == traits.True
		}
	}
	return pinned
}

// WithTrait sets any trait by key, as omp_alloctrait_t does.
func WithTrait(k traits.Key, v uintptr) Option { return trait(k, v) }
