// Package envvar holds the one rule for reading ompalloc's environment
// variables (OMP_ALLOCATOR, OMP_DEFAULT_DEVICE and every OMPALLOC_*): a
// variable set to an empty value, or to white space only, counts as unset.
// It gets the default, with no warning, as `VAR= program` is how a shell
// clears a setting for one command. Any other value is parsed, and a bad
// one warns once and gets the default.
package envvar

import (
	"os"
	"strings"
)

// Lookup returns the value of the variable name with surrounding white
// space removed, and whether it counts as set: present and not blank.
func Lookup(name string) (value string, set bool) {
	v, ok := os.LookupEnv(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}
