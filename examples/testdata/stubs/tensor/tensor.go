// Package tensor stands in for gorgonia.org/tensor (see ../README.md).
package tensor

// Dense is a dense tensor.
type Dense struct {
	shape []int
	data  any
}

// ConsOpt is a construction option.
type ConsOpt func(*Dense)

// New makes a tensor from its options.
func New(opts ...ConsOpt) *Dense {
	t := new(Dense)
	for _, o := range opts {
		o(t)
	}
	return t
}

// WithShape sets the shape.
func WithShape(dims ...int) ConsOpt { return func(t *Dense) { t.shape = dims } }

// WithBacking uses x (a slice) as the tensor's data, without copying, as
// gorgonia's does.
func WithBacking(x any, argMask ...[]bool) ConsOpt { return func(t *Dense) { t.data = x } }

// Shape returns the shape.
func (t *Dense) Shape() []int { return t.shape }

// Data returns the backing slice.
func (t *Dense) Data() any { return t.data }
