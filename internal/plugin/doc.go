// Package plugin defines what a device plugin provides: the thin per-vendor
// part of a device (host, CUDA, HSA), as LLVM's PluginInterface leaves to each
// vendor. Package target holds the generic logic written once over it.
package plugin
