//go:build !linux && !darwin

package pinlimit

// Elsewhere ompalloc does not build at all (loader/unsupported.go says so
// in one line); these keep this package from adding errors of its own to
// that line.

const ramLimited = false

func facts() Default { return Default{Memlock: -1} }
