// Package reliability holds only tests: the runtime's promises checked
// across packages (see RELIABILITY.md at the repository root). Faults
// injected at every point where memory is obtained or pinned and in every
// driver call of the fake GPU drivers; a table of bad inputs against
// sentinel blocks and locks; a bounded soak of many goroutines; a fuzz
// target over allocator operation sequences checked against a model; and
// the process-lifetime promises (no signal handlers, no exits, no panics
// but abort_fb). Its TestMain fails the run if anything leaked.
package reliability
