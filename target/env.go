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

func warnEnv(name, value, why, using string) {
	warn.Printf(warn.Env, "target", "%s=%q: %s; using %s", name, value, why, using)
}

func readEnv() (StagingConfig, pinreg.MapMode) {
	cfg := DefaultStagingConfig()
	if v, ok := envvar.Lookup(envvar.StagingThreshold); ok {
		if n, err := parseBytes(v); err != nil {
			warnEnv(envvar.StagingThreshold, v, err.Error(), strconv.FormatUint(uint64(cfg.Threshold), 10))
		} else {
			cfg.Threshold = n
		}
	}
	if v, ok := envvar.Lookup(envvar.StagingPool); ok {
		if n, err := parseBytes(v); err != nil {
			warnEnv(envvar.StagingPool, v, err.Error(), strconv.FormatUint(uint64(cfg.MaxPoolBytes), 10))
		} else {
			cfg.MaxPoolBytes = n
		}
	}
	mode := pinreg.MapOff
	if v, ok := envvar.Lookup(envvar.LockMapped); ok {
		m, err := pinreg.ParseMapMode(v)
		if err != nil {
			warnEnv(envvar.LockMapped, v, err.Error(), "off")
		} else {
			mode = m
		}
	}
	return cfg, mode
}

// defaultDevice reads OMP_DEFAULT_DEVICE against the initial device's number.
func defaultDevice(initial int) int {
	v, ok := envvar.Lookup(envvar.DefaultDevice)
	if !ok {
		return 0
	}
	if strings.EqualFold(v, "initial") {
		return initial
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > initial {
		warnEnv(envvar.DefaultDevice, v, fmt.Sprintf("not a device number in 0..%d", initial), "0")
		return 0
	}
	return n
}

// parseBytes reads a size as every OMPALLOC_* variable does (internal/envsize).
func parseBytes(s string) (uintptr, error) {
	n, err := envsize.Parse(s)
	return uintptr(n), err
}
