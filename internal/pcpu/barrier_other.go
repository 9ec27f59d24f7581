//go:build !linux

package pcpu

func initBarrier() bool { return false }

func barrier() { panic("pcpu: no process-wide barrier on this system (HasBarrier is false)") }

func barrierRefused() error { return nil }
