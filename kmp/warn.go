package kmp

import "github.com/ompalloc/ompalloc/internal/warn"

// warnf sends one warning about bad input through the module's hook
// (package logging; by default a line on stderr, as libomp's KMP_WARNING),
// where a C API can only return nil.
func warnf(format string, args ...any) {
	warn.Printf(warn.BadInput, "kmp", format, args...)
}
