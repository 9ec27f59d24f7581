// Package apisurface holds only tests of the module's public API: that the
// public packages export none of the plumbing between this module's own
// packages, which lives under internal/ where no user can import it, and
// that their count of names does not grow back silently.
package apisurface
