package kmp

import (
	"fmt"
	"io"
	"os"
	"sync"
)

var (
	warnMu sync.Mutex
	// warnOut receives warnings about bad input (tests capture it).
	warnOut io.Writer = os.Stderr
)

// warnf writes one warning line, as libomp's KMP_WARNING does, where a C
// API can only return nil.
func warnf(format string, args ...any) {
	warnMu.Lock()
	defer warnMu.Unlock()
	fmt.Fprintf(warnOut, "ompalloc: warning: "+format+"\n", args...)
}
