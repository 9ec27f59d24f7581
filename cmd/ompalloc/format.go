package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ompalloc/ompalloc/internal/envsize"
)

// fmtBytes writes n with binary units: "64 B", "4 KiB", "1.5 GiB".
func fmtBytes(n int64) string {
	if n < 0 {
		return "-" + fmtBytes(-n)
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 || v == math.Trunc(v) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// fmtNs writes a duration given in nanoseconds with three significant
// digits: "52.3 ns", "1.20 µs", "15.0 ms".
func fmtNs(ns float64) string {
	switch {
	case ns <= 0 || math.IsNaN(ns) || math.IsInf(ns, 0):
		return "-"
	case ns < 1e3:
		return sig3(ns) + " ns"
	case ns < 1e6:
		return sig3(ns/1e3) + " µs"
	case ns < 1e9:
		return sig3(ns/1e6) + " ms"
	}
	return sig3(ns/1e9) + " s"
}

// fmtRate writes a bandwidth in GB/s (10^9 bytes per second).
func fmtRate(gbps float64) string {
	if gbps <= 0 || math.IsNaN(gbps) || math.IsInf(gbps, 0) {
		return "-"
	}
	return sig3(gbps) + " GB/s"
}

func sig3(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// parseSize reads a byte count: "4096", "4K", "4KiB", "64M", "1G", "512B".
// The units are powers of 1024.
func parseSize(s string) (int64, error) {
	n, err := envsize.Parse(s) // the rule of the OMPALLOC_* sizes
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("%q is not a size here: it must be at least 1 byte", s)
	}
	return int64(n), nil
}

// parseList reads a comma-separated list with parse.
func parseList(s string, parse func(string) (int64, error)) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q: empty list", s)
	}
	return out, nil
}

// parseCount reads a positive count: "100", "10000", "10k", "1M" (powers of
// 1000 here: these are counts, not bytes).
func parseCount(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(strings.ReplaceAll(s, "_", "")))
	mult := int64(1)
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1000, strings.TrimSuffix(t, "k")
	case strings.HasSuffix(t, "m"):
		mult, t = 1000000, strings.TrimSuffix(t, "m")
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > 10_000_000/mult {
		return 0, fmt.Errorf("%q is not a count between 1 and 10M", s)
	}
	return n * mult, nil
}
