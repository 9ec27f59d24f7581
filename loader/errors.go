package loader

import "errors"

// Feature errors; test with errors.Is.
var (
	// ErrNotFound: no candidate of the library could be opened.
	ErrNotFound = errors.New("library not found")
	// ErrDisabled: the library was switched off through its environment variable.
	ErrDisabled = errors.New("library disabled")
	// ErrInitFailed: the library loaded but its initialisation call failed,
	// or it is a driver older than ompalloc needs (target.DriverError says which).
	ErrInitFailed = errors.New("driver initialisation failed")
	// ErrSymbolMissing: a library lacks a symbol the runtime binds.
	ErrSymbolMissing = errors.New("symbol missing")
)
