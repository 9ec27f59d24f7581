//go:build race

package host

// raceEnabled: the race detector maps shadow memory as the program runs.
const raceEnabled = true
