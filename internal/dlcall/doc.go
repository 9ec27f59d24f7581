// Package dlcall calls C functions found with loader (dlsym) through
// purego: plumbing for this module's plugins, tests and command, not API.
// (On a system ompalloc does not support it is empty: loader's build error
// is the one line a build there gives.)
package dlcall
