package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1 // the command ran and something failed (a file could not be written)
	exitUsage   = 2 // bad command line
	exitBug     = 3 // an internal error (a panic caught at the top)
	programName = "ompalloc"
)

// usageText is the short help; the flags of each command are generated
// from its flag set, so that none is left out.
var usageText = `ompalloc — what the OpenMP memory runtime sees on this machine, and how fast it is

Usage:
  ompalloc info ` + func() string { fs, _ := infoFlags(); return synopsis(fs, len("  ompalloc info "), 76) }() + `
      drivers, devices, memory spaces, allocators, OMP_ALLOCATOR,
      RLIMIT_MEMLOCK and VmLck, the pinned-bytes limit, registries
  ompalloc bench ` + func() string { fs, _ := benchFlags(); return synopsis(fs, len("  ompalloc bench "), 76) }() + `
      alloc+free cost, lock/unlock cost, and with a GPU transfer bandwidth
      and small-copy latency; a table, JSON, or an SVG chart
  ompalloc timeline ` + func() string { fs, _ := timelineFlags(); return synopsis(fs, len("  ompalloc timeline "), 76) }() + ` FILE
      draws a device-memory timeline a program recorded
      (target.RecordMemoryHistory) as an SVG chart
  ompalloc help [COMMAND]
  ompalloc version

Run "ompalloc help bench" for the bench flags.
`

// run is the whole command; main only exits with its result. It never
// panics: a panic inside is reported as an internal error (exit 3).
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "%s: internal error: %v\n%s", programName, r, debug.Stack())
			code = exitBug
		}
	}()
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "info":
		return runInfo(rest, stdout, stderr)
	case "bench":
		return runBench(rest, stdout, stderr)
	case "timeline":
		return runTimeline(rest, stdout, stderr)
	case blockMemoryChild: // bench's own: one block_memory figure in a fresh process
		return runBlockMemoryChild(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return runHelp(rest, stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, versionLine())
		return exitOK
	default:
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", programName, cmd, usageText)
		return exitUsage
	}
}

func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	switch args[0] {
	case "info":
		fs, _ := infoFlags()
		printUsage(stdout, fs, infoUsage)
	case "bench":
		fs, _ := benchFlags()
		printUsage(stdout, fs, benchUsage)
	case "timeline":
		fs, _ := timelineFlags()
		printUsage(stdout, fs, timelineUsage)
	default:
		fmt.Fprintf(stderr, "%s: no help for %q\n\n%s", programName, args[0], usageText)
		return exitUsage
	}
	return exitOK
}

// parseFlags parses a subcommand's flags; on error it prints the message and
// the subcommand's usage on stderr. -h gives the usage on stdout.
func parseFlags(fs *flag.FlagSet, head string, args []string, stdout, stderr io.Writer) (ok bool, code int) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(stdout, fs, head)
		return false, exitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s %s: %v\n\n", programName, fs.Name(), err)
		printUsage(stderr, fs, head)
		return false, exitUsage
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s %s: unexpected argument %q\n\n", programName, fs.Name(), fs.Arg(0))
		printUsage(stderr, fs, head)
		return false, exitUsage
	}
	return true, exitOK
}

func printUsage(w io.Writer, fs *flag.FlagSet, head string) {
	fmt.Fprint(w, head)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		// Continuation lines line up under the description; a usage that
		// says its own default ("(default: the first accelerator") does not
		// get the flag package's literal one too ("(default -1)").
		lines := strings.Split(usage, "\n")
		for i := range lines {
			lines[i] = strings.TrimSpace(lines[i])
		}
		usage = strings.Join(lines, "\n"+strings.Repeat(" ", 25))
		fmt.Fprintf(w, "%-24s %s", line, usage)
		if f.DefValue != "" && f.DefValue != "false" && !strings.Contains(usage, "(default") {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// version returns the module version and VCS revision the binary was built
// from, as far as the build recorded them.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " " + rev[:min(12, len(rev))] + dirty
	}
	return v
}

func versionLine() string {
	return strings.Join([]string{programName, version(), runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH}, " ")
}
