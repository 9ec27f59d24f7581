//go:build ecosystemdeps

package ecosystem

// The modules the README's snippets import, so that go mod tidy keeps
// them (the snippets themselves are written out only while the test runs).
import (
	_ "github.com/apache/arrow-go/v18/arrow/array"
	_ "github.com/apache/arrow-go/v18/arrow/memory"
	_ "github.com/ompalloc/ompalloc/alloc"
	_ "github.com/ompalloc/ompalloc/kmp"
	_ "github.com/ompalloc/ompalloc/logging"
	_ "github.com/ompalloc/ompalloc/memprof"
	_ "github.com/ompalloc/ompalloc/memspace"
	_ "github.com/ompalloc/ompalloc/target"
	_ "github.com/ompalloc/ompalloc/traits"
	_ "gonum.org/v1/gonum/mat"
	_ "gorgonia.org/tensor"
)
