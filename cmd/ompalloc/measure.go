package main

import (
	"math"
	"time"
)

// maxIters bounds the iterations of one round.
const maxIters = 1 << 30

// measure times op(n), which must do n operations, over growing n, as
// testing.B does: each round is sized from the previous one's speed to take
// about half the budget, and measuring stops once a round took a third of
// the budget or the rounds together took all of it. It returns the time per
// operation of the last (largest) round, in nanoseconds, and its n.
//
// One untimed operation comes first, so that first-touch costs (page
// faults, a pinned chunk being locked) do not count.
func measure(budget time.Duration, op func(n int) error) (nsPerOp float64, iters int, err error) {
	if err := op(1); err != nil {
		return 0, 0, err
	}
	n := 1
	var spent time.Duration
	for {
		start := time.Now()
		if err := op(n); err != nil {
			return 0, 0, err
		}
		el := max(time.Since(start), 1)
		spent += el
		per := float64(el) / float64(n)
		if el >= budget/3 || spent >= budget || n >= maxIters {
			return per, n, nil
		}
		// Aim the next round at half the budget, at most 100 times this one,
		// at least twice, and without running far past the budget.
		want := float64(budget/2) / per
		left := float64(budget-spent) / per
		next := math.Min(math.Min(want, left), float64(n)*100)
		next = math.Max(next, float64(n)*2)
		n = int(math.Min(next, maxIters))
	}
}
