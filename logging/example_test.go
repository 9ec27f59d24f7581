package logging_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/ompalloc/ompalloc/kmp"
	"github.com/ompalloc/ompalloc/logging"
)

// Route the warnings to the program's structured logger.
func ExampleSetLogger() {
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // no time stamp, for a stable example
			}
			return a
		},
	})
	logging.SetLogger(slog.New(h))
	defer logging.SetLogger(nil) // back to one line on stderr

	kmp.DestroyAllocator(kmp.AllocatorHandle(5000)) // no such allocator
	// Output:
	// level=WARN msg="omp_destroy_allocator: allocator#5000 is not a live allocator" kind=bad_input package=kmp
}

// counter counts warnings by kind.
type counter struct {
	slog.Handler
	n map[string]int
}

func (c counter) Enabled(context.Context, slog.Level) bool { return true }

func (c counter) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "kind" {
			c.n[a.Value.String()]++
		}
		return true
	})
	return nil
}

// Count the warnings instead of printing them (slog.DiscardHandler alone
// silences them).
func ExampleSetLogger_count() {
	c := counter{Handler: slog.DiscardHandler, n: map[string]int{}}
	logging.SetLogger(slog.New(c))
	defer logging.SetLogger(nil)

	kmp.DestroyAllocator(kmp.AllocatorHandle(5001))
	kmp.DestroyAllocator(kmp.AllocatorHandle(5002))
	fmt.Println(c.n["bad_input"], "bad inputs")
	// Output:
	// 2 bad inputs
}
