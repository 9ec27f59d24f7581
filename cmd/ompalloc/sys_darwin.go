package main

const (
	rlimitMemlock = 6 // RLIMIT_MEMLOCK on darwin
	rlimInfinity  = 1<<63 - 1
)
