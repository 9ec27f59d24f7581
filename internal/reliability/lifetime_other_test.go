//go:build !(linux && (amd64 || arm64))

package reliability

import "testing"

func requireSameDispositions(t *testing.T, f func()) {
	t.Skip("signal dispositions are read with rt_sigaction on linux/amd64 and linux/arm64")
}
