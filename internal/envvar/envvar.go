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

// The environment variables ompalloc reads. Their names are no API of the
// public packages: each package's doc names the ones it reads.
const (
	// Allocator is OMP_ALLOCATOR (OpenMP 5.1): the default allocator,
	// read by package alloc at first use.
	Allocator = "OMP_ALLOCATOR"
	// DefaultDevice is OpenMP's default-device-var: a device number, or
	// "initial" for the host.
	DefaultDevice = "OMP_DEFAULT_DEVICE"
	// HugePages chooses the pages of pinned chunks and huge regions:
	// thp (the default), off or hugetlb.
	HugePages = "OMPALLOC_HUGEPAGES"
	// LeakCheck turns leak-check mode on when set to 1.
	LeakCheck = "OMPALLOC_LEAKCHECK"
	// PinnedLimit overrides the default limit on pinned bytes ("0" means
	// no limit; sizes accept K, M, G suffixes).
	PinnedLimit = "OMPALLOC_PINNED_LIMIT"
	// StagingThreshold overrides target.StagingConfig.Threshold (bytes, or
	// with a K, M, G or T suffix; 0 turns staging off).
	StagingThreshold = "OMPALLOC_STAGING_THRESHOLD"
	// StagingPool overrides target.StagingConfig.MaxPoolBytes (a size).
	StagingPool = "OMPALLOC_STAGING_POOL"
	// LockMapped is LLVM's switch for locking host buffers while they are
	// transferred: off (default), on (failures ignored), mandatory.
	LockMapped = "LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS"
)
