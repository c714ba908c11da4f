package main

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Interleaved rounds run the implementations in the order given first,
// then in shuffles that are the same in every run: each implementation
// comes first, and follows more than one other, so that what a turn leaves
// behind does not always fall on the one listed after it.
func TestTurnOrder(t *testing.T) {
	const n, rounds = 6, 60
	if got := turnOrder(0, n); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) {
		t.Errorf("round 0: %v, want the order given", got)
	}
	first := map[int]int{}
	before := map[int]map[int]bool{} // implementation -> those that ran just before it
	for round := range rounds {
		order := turnOrder(round, n)
		if !slices.Equal(order, turnOrder(round, n)) {
			t.Fatalf("round %d: two orders", round)
		}
		if sorted := slices.Sorted(slices.Values(order)); !slices.Equal(sorted, []int{0, 1, 2, 3, 4, 5}) {
			t.Fatalf("round %d: %v is not an order of the %d implementations", round, order, n)
		}
		first[order[0]]++
		for k := 1; k < n; k++ {
			if before[order[k]] == nil {
				before[order[k]] = map[int]bool{}
			}
			before[order[k]][order[k-1]] = true
		}
	}
	for i := range n {
		if first[i] == 0 {
			t.Errorf("implementation %d never goes first in %d rounds", i, rounds)
		}
		if len(before[i]) < n-1 {
			t.Errorf("implementation %d follows only %d of the other %d", i, len(before[i]), n-1)
		}
	}
	if got := turnOrder(3, 1); !slices.Equal(got, []int{0}) {
		t.Errorf("one implementation: %v", got)
	}
}

// A turn ends once the implementation's own deferred work is done (an
// Observer's queued recording): its time includes it, where the next turn
// would otherwise pay for it.
func TestATurnIncludesItsSettling(t *testing.T) {
	const settling = 150 * time.Millisecond
	settled := false
	im := &impl{
		name: "fake",
		cycle: func(context.Context, string) (time.Duration, time.Duration, outcome, error) {
			return 0, 0, acquired, nil
		},
		drain:  func() {},
		settle: func() { time.Sleep(settling); settled = true },
	}
	res := bench(t.Context(), im, config{clients: 1, keys: 1, ops: 3, ttl: time.Second}, nil)
	if !settled || res.Elapsed < settling || res.Cycles != 3 {
		t.Errorf("settled %v; %d cycles in %v: the turn must include its %v of settling", settled, res.Cycles, res.Elapsed, settling)
	}
}
