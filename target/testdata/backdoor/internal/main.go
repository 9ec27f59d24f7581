// The same back door through the mutable registry type itself: an outside
// program cannot import it.
package main

import (
	"fmt"

	"github.com/ompalloc/ompalloc/internal/pinreg"
)

func main() {
	var r *pinreg.Registry
	fmt.Println(r.Release(0))
}
