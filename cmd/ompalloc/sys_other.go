//go:build !linux && !darwin

package main

func memlockLimit() (soft, hard int64, ok bool) { return 0, 0, false }
