package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// benchGroups are the bench's groups, in the order they run; --groups
// picks some of them.
var benchGroups = []string{"alloc_free", "alloc_goroutines", "block_memory", "lock_size", "lock_regions",
	"partition_alloc_free", "pin_huge", "h2d", "d2h", "small_copy", "device_alloc"}

// gpuGroups need an accelerator.
var gpuGroups = []string{"h2d", "d2h", "small_copy", "device_alloc"}

// groupsFlag is --groups: a comma-separated list of benchGroups.
type groupsFlag struct{ set *map[string]bool }

func (g groupsFlag) String() string {
	if g.set == nil || *g.set == nil {
		return ""
	}
	var s []string
	for _, n := range benchGroups {
		if (*g.set)[n] {
			s = append(s, n)
		}
	}
	return strings.Join(s, ",")
}

func (g groupsFlag) Set(v string) error {
	m := map[string]bool{}
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(benchGroups, n) {
			return fmt.Errorf("unknown group %q (the groups: %s)", n, strings.Join(benchGroups, ", "))
		}
		m[n] = true
	}
	*g.set = m
	return nil
}

// wants reports whether the run measures group (every group without
// --groups).
func (c *benchConfig) wants(group string) bool { return c.groups == nil || c.groups[group] }

// wantsGPU reports whether the run measures any group that needs an
// accelerator.
func (c *benchConfig) wantsGPU() bool {
	for _, g := range gpuGroups {
		if c.wants(g) {
			return true
		}
	}
	return false
}

// keep drops the cases of the groups not asked for.
func (c *benchConfig) keep(s *benchSection) *benchSection {
	if s == nil {
		return nil
	}
	s.cases = slices.DeleteFunc(s.cases, func(bc *benchCase) bool { return !c.wants(bc.group) })
	return s
}

// synopsis is the form of fs's flags for the usage lines, "[--full]
// [--json] [--svg FILE] ...", generated so that none is left out, broken
// into lines of at most width characters after the first line's start
// column (the later lines indented to it).
func synopsis(fs *flag.FlagSet, start, width int) string {
	var b strings.Builder
	col := start
	fs.VisitAll(func(f *flag.Flag) {
		part := "[--" + f.Name + "]"
		if name, _ := flag.UnquoteUsage(f); name != "" {
			part = "[--" + f.Name + " " + name + "]"
		}
		switch {
		case col == start:
		case col+1+len(part) > width:
			b.WriteString("\n" + strings.Repeat(" ", start))
			col = start
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(part)
		col += len(part)
	})
	return b.String()
}
