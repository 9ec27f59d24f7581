package target

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ompalloc/ompalloc/internal/envsize"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/warn"
)

// Environment variables read at discovery.
const (
	// EnvStagingThreshold overrides StagingConfig.Threshold (bytes, or with
	// a K, M, G or T suffix; 0 turns staging off).
	EnvStagingThreshold = "OMPALLOC_STAGING_THRESHOLD"
	// EnvStagingPool overrides StagingConfig.MaxPoolBytes (a size, as
	// EnvStagingThreshold).
	EnvStagingPool = "OMPALLOC_STAGING_POOL"
	// EnvLockMapped is LLVM's switch for locking host buffers while they are
	// transferred: off (default), on (failures ignored), mandatory.
	EnvLockMapped = "LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS"
	// EnvDefaultDevice is OpenMP's default-device-var: a device number, or
	// "initial" for the host.
	EnvDefaultDevice = "OMP_DEFAULT_DEVICE"
)

func warnEnv(name, value, why, using string) {
	warn.Printf(warn.Env, "target", "%s=%q: %s; using %s", name, value, why, using)
}

func readEnv() (StagingConfig, pinreg.MapMode) {
	cfg := DefaultStagingConfig()
	if v, ok := envvar.Lookup(EnvStagingThreshold); ok {
		if n, err := parseBytes(v); err != nil {
			warnEnv(EnvStagingThreshold, v, err.Error(), strconv.FormatUint(uint64(cfg.Threshold), 10))
		} else {
			cfg.Threshold = n
		}
	}
	if v, ok := envvar.Lookup(EnvStagingPool); ok {
		if n, err := parseBytes(v); err != nil {
			warnEnv(EnvStagingPool, v, err.Error(), strconv.FormatUint(uint64(cfg.MaxPoolBytes), 10))
		} else {
			cfg.MaxPoolBytes = n
		}
	}
	mode := pinreg.MapOff
	if v, ok := envvar.Lookup(EnvLockMapped); ok {
		m, err := pinreg.ParseMapMode(v)
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
	v, ok := envvar.Lookup(EnvDefaultDevice)
	if !ok {
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

// parseBytes reads a size as every OMPALLOC_* variable does (internal/envsize).
func parseBytes(s string) (uintptr, error) {
	n, err := envsize.Parse(s)
	return uintptr(n), err
}
