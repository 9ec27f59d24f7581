package main

const (
	rlimitMemlock = 8 // RLIMIT_MEMLOCK on linux/amd64 and linux/arm64
	rlimInfinity  = ^uint64(0)
)
