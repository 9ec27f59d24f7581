// Package mat stands in for gonum.org/v1/gonum/mat (see ../../README.md).
package mat

// Dense is a row-major matrix over a []float64.
type Dense struct {
	r, c int
	data []float64
}

// NewDense uses data as the matrix's backing store, as gonum's does; it
// panics if len(data) != r*c (gonum: ErrShape).
func NewDense(r, c int, data []float64) *Dense {
	if data == nil {
		data = make([]float64, r*c)
	}
	if len(data) != r*c {
		panic("mat: dimension mismatch")
	}
	return &Dense{r: r, c: c, data: data}
}

// Dims returns the numbers of rows and columns.
func (m *Dense) Dims() (r, c int) { return m.r, m.c }

// At returns the element at row i, column j.
func (m *Dense) At(i, j int) float64 { return m.data[i*m.c+j] }

// Set sets the element at row i, column j.
func (m *Dense) Set(i, j int, v float64) { m.data[i*m.c+j] = v }
