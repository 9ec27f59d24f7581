package target

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ompalloc/ompalloc/pinned"
)

// Environment variables read at discovery.
const (
	// EnvStagingThreshold overrides StagingConfig.Threshold (bytes, or with
	// a K, M or G suffix; 0 turns staging off).
	EnvStagingThreshold = "OMPALLOC_STAGING_THRESHOLD"
	// EnvStagingPool overrides StagingConfig.MaxPoolBytes.
	EnvStagingPool = "OMPALLOC_STAGING_POOL"
	// EnvLockMapped is LLVM's switch for locking host buffers while they are
	// transferred: off (default), on (failures ignored), mandatory.
	EnvLockMapped = pinned.EnvLockMapped
	// EnvDefaultDevice is OpenMP's default-device-var: a device number, or
	// "initial" for the host.
	EnvDefaultDevice = "OMP_DEFAULT_DEVICE"
)

// warnOut receives the warnings about invalid environment values.
var warnOut = os.Stderr

func warnEnv(name, value, why, using string) {
	fmt.Fprintf(warnOut, "ompalloc: %s=%q: %s; using %s\n", name, value, why, using)
}

func readEnv() (StagingConfig, pinned.MapMode) {
	cfg := DefaultStagingConfig
	if v, ok := os.LookupEnv(EnvStagingThreshold); ok {
		if n, err := parseBytes(v); err != nil {
			warnEnv(EnvStagingThreshold, v, err.Error(), strconv.FormatUint(uint64(cfg.Threshold), 10))
		} else {
			cfg.Threshold = n
		}
	}
	if v, ok := os.LookupEnv(EnvStagingPool); ok {
		if n, err := parseBytes(v); err != nil {
			warnEnv(EnvStagingPool, v, err.Error(), strconv.FormatUint(uint64(cfg.MaxPoolBytes), 10))
		} else {
			cfg.MaxPoolBytes = n
		}
	}
	mode := pinned.MapOff
	if v, ok := os.LookupEnv(EnvLockMapped); ok && v != "" {
		m, err := pinned.ParseMapMode(v)
		if err != nil {
			warnEnv(EnvLockMapped, v, err.Error(), "off")
		} else {
			mode = m
		}
	}
	return cfg, mode
}

// defaultDevice reads OMP_DEFAULT_DEVICE against the initial device's number.
func defaultDevice(initial int) int {
	v, ok := os.LookupEnv(EnvDefaultDevice)
	v = strings.TrimSpace(v)
	if !ok || v == "" {
		return 0
	}
	if strings.EqualFold(v, "initial") {
		return initial
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > initial {
		warnEnv(EnvDefaultDevice, v, fmt.Sprintf("not a device number in 0..%d", initial), "0")
		return 0
	}
	return n
}

// parseBytes reads "65536", "64K", "4M", "1G" (powers of 1024).
func parseBytes(s string) (uintptr, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	shift := 0
	switch {
	case strings.HasSuffix(t, "K"):
		shift = 10
	case strings.HasSuffix(t, "M"):
		shift = 20
	case strings.HasSuffix(t, "G"):
		shift = 30
	}
	if shift > 0 {
		t = t[:len(t)-1]
	}
	n, err := strconv.ParseUint(strings.TrimSpace(t), 10, 64)
	if err != nil || n > uint64(^uintptr(0))>>shift {
		return 0, fmt.Errorf("not a size in bytes (like 65536 or 64K)")
	}
	return uintptr(n << shift), nil
}
