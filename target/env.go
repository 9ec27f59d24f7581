package target

import (
	"strconv"

	"github.com/ompalloc/ompalloc/internal/envsize"
	"github.com/ompalloc/ompalloc/internal/envvar"
	"github.com/ompalloc/ompalloc/internal/pinreg"
	"github.com/ompalloc/ompalloc/internal/warn"
)

func warnEnv(name, value, why, using string) {
	warn.Printf(warn.Env, "target", "%s=%q: %s; using %s", name, value, why, using)
}

func readEnv() (StagingConfig, pinreg.MapMode) {
	cfg := defaultStagingConfig()
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

// parseBytes reads a size as every OMPALLOC_* variable does (internal/envsize).
func parseBytes(s string) (uintptr, error) {
	n, err := envsize.Parse(s)
	return uintptr(n), err
}
