// Package apisurface holds only a test: that the module's public packages
// export none of the plumbing between this module's own packages (issue
// 22), which lives under internal/ where no user can import it.
package apisurface
