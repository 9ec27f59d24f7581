//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "gpuprobe: Linux only (the CUDA driver API through purego)")
	os.Exit(2)
}
