package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock/redlock/quorum"
)

func TestMajority(t *testing.T) {
	for n, want := range []int{1, 1, 2, 2, 3, 3, 4, 4} {
		if got := quorum.Majority(n); got != want {
			t.Errorf("Majority(%d) = %d, want %d", n, got, want)
		}
	}
}

// behaviour is what one fake node does in TestEveryCombination.
type behaviour int

const (
	ok     behaviour = iota // accepts
	taken                   // replies, but refuses (a lock held by someone else)
	failed                  // replies with an error
	hung                    // never replies until the test releases it
	behaviours
)

func (b behaviour) String() string { return [...]string{"ok", "taken", "err", "hung"}[b] }

var errNode = errors.New("node error")

// TestEveryCombination enumerates every assignment of ok/taken/error/hung to
// N = 1..7 nodes. Node i replies after i+1 ms of fake time (synctest), so the
// test can compute the exact moment the decision was knowable and check that
// Decide returned then: early when replies settle it, at the deadline only
// when the hung nodes could still change it. It also checks that every call,
// hung ones included, is observed to completion after the decision and that
// no goroutine is left behind (synctest fails on a leaked, blocked goroutine).
func TestEveryCombination(t *testing.T) {
	const wait = time.Second
	combos := 0
	for n := 1; n <= 7; n++ {
		total := 1
		for range n {
			total *= int(behaviours)
		}
		for code := range total {
			nodes := make([]behaviour, n)
			for i, c := 0, code; i < n; i, c = i+1, c/int(behaviours) {
				nodes[i] = behaviour(c % int(behaviours))
			}
			checkCombination(t, nodes, wait)
			combos++
		}
	}
	t.Logf("checked %d combinations", combos)
}

func checkCombination(t *testing.T, nodes []behaviour, wait time.Duration) {
	t.Helper()
	n := len(nodes)
	need := quorum.Majority(n)

	// The decision is knowable at the reply that completes a majority of
	// accepts or makes one impossible; otherwise only at the deadline.
	wantWon, wantAt := false, wait
	accepted, refused := 0, 0
	for i, b := range nodes {
		switch b {
		case ok:
			accepted++
		case taken, failed:
			refused++
		default:
			continue
		}
		if accepted >= need || refused > n-need {
			wantWon, wantAt = accepted >= need, time.Duration(i+1)*time.Millisecond
			break
		}
	}

	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		round := quorum.Start(n, func(i int) (bool, error) {
			switch nodes[i] {
			case hung:
				<-release
				return true, nil // a late grant: must be observable, not counted
			case failed:
				time.Sleep(time.Duration(i+1) * time.Millisecond)
				return false, errNode
			default:
				time.Sleep(time.Duration(i+1) * time.Millisecond)
				return nodes[i] == ok, nil
			}
		})
		start := time.Now()
		tally := round.Decide(t.Context(), wait, func(v bool, err error) bool { return err == nil && v })
		if got := time.Since(start); got != wantAt || tally.Won != wantWon {
			t.Fatalf("%v: won=%v after %v, want won=%v after %v", nodes, tally.Won, got, wantWon, wantAt)
		}
		if tally.Need != need || tally.Won != (tally.Accepted >= need) {
			t.Fatalf("%v: inconsistent tally %+v", nodes, tally)
		}
		for i, v := range tally.Votes {
			if v.Replied && nodes[i] == hung {
				t.Fatalf("%v: hung node %d counted as replied", nodes, i)
			}
			if !v.Replied && wantAt == wait && !errors.Is(v.Err, quorum.ErrNoReply) {
				t.Fatalf("%v: node %d unanswered at the deadline with err %v", nodes, i, v.Err)
			}
			if v.Replied && (v.Accepted != (nodes[i] == ok) || errors.Is(v.Err, errNode) != (nodes[i] == failed)) {
				t.Fatalf("%v: node %d vote %+v", nodes, i, v)
			}
		}
		close(release)
		round.Wait()
		for i := range n {
			if v, err := round.Result(i); nodes[i] == hung && (!v || err != nil) {
				t.Fatalf("%v: late result of node %d = %v, %v", nodes, i, v, err)
			}
		}
	})
}

func TestDecideContextCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		cause := errors.New("caller gave up")
		release := make(chan struct{})
		round := quorum.Start(3, func(i int) (int, error) {
			if i == 0 {
				return 1, nil
			}
			<-release
			return 1, nil
		})
		time.AfterFunc(5*time.Millisecond, func() { cancel(cause) })
		start := time.Now()
		tally := round.Decide(ctx, time.Hour, func(int, error) bool { return true })
		if tally.Won || time.Since(start) != 5*time.Millisecond {
			t.Fatalf("won=%v after %v; want a loss at the cancellation", tally.Won, time.Since(start))
		}
		for i := 1; i < 3; i++ {
			if !errors.Is(tally.Votes[i].Err, cause) {
				t.Errorf("node %d err = %v, want the context's cause", i, tally.Votes[i].Err)
			}
		}
		close(release)
		<-round.Settled(2)
		round.Wait()
	})
}

func TestDecideZeroNodes(t *testing.T) {
	tally := quorum.Start(0, func(int) (int, error) { return 0, nil }).Decide(t.Context(), 0, nil)
	if tally.Won {
		t.Fatal("zero nodes won a majority")
	}
}

func ExampleRound_Decide() {
	// Five nodes; the fourth is hung. Three quick accepts decide at once.
	hang := make(chan struct{})
	round := quorum.Start(5, func(i int) (string, error) {
		if i == 3 {
			<-hang
		}
		return fmt.Sprintf("reply %d", i), nil
	})
	tally := round.Decide(context.Background(), time.Second, func(string, error) bool { return true })
	fmt.Println("won:", tally.Won, "need:", tally.Need)

	// The hung call is still observed once it returns.
	close(hang)
	fmt.Println(round.Result(3))
	// Output:
	// won: true need: 3
	// reply 3 <nil>
}

// Collect hears every node out where Decide stops at a majority: with three
// quick accepts of five, Decide returns at once; Collect waits for the
// fourth and fifth, and closes a hung one at the deadline.
func TestCollectWaitsForEveryNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := make(chan struct{})
		start := func() *quorum.Round[int] {
			return quorum.Start(5, func(i int) (int, error) {
				switch i {
				case 3:
					time.Sleep(20 * time.Millisecond)
				case 4:
					<-hang
				}
				return i, nil
			})
		}
		accept := func(int, error) bool { return true }

		began := time.Now()
		decided := start().Decide(t.Context(), time.Second, accept)
		if !decided.Won || time.Since(began) != 0 || decided.Votes[3].Replied {
			t.Fatalf("Decide: won=%v after %v, node 3 replied=%v; want a win at once without node 3", decided.Won, time.Since(began), decided.Votes[3].Replied)
		}

		began = time.Now()
		all := start().Collect(t.Context(), time.Second, accept)
		if time.Since(began) != time.Second {
			t.Fatalf("Collect returned after %v; want the deadline (node 4 hangs)", time.Since(began))
		}
		if !all.Votes[3].Replied || all.Votes[3].Value != 3 || all.Accepted != 4 || all.Refused != 1 {
			t.Fatalf("Collect: %+v; want nodes 0-3 replied and accepted, node 4 refused", all)
		}
		if !errors.Is(all.Votes[4].Err, quorum.ErrNoReply) {
			t.Fatalf("hung node's error = %v, want ErrNoReply", all.Votes[4].Err)
		}
		close(hang)
	})
}

// AfterAll runs its function exactly once, after every call has returned,
// inside the last Deliver, whichever order the deliveries and the AfterAll
// come in (each order of three deliveries against the AfterAll, and
// concurrent deliveries under the race detector); once every call has
// returned it keeps nothing and says so.
func TestAfterAllRunsOnceEveryCallReturned(t *testing.T) {
	const n = 3
	returned := func(r *quorum.Round[int], i int) bool {
		select {
		case <-r.Settled(i):
			return true
		default:
			return false
		}
	}
	for at := 0; at < n; at++ { // the AfterAll after `at` deliveries
		r := quorum.Begin[int](n)
		runs := 0
		var sawAll bool
		f := func() {
			runs++
			sawAll = true
			for i := range n {
				if !returned(r, i) {
					sawAll = false
				}
			}
		}
		for i := range n {
			if i == at && !r.AfterAll(f) {
				t.Fatalf("after %d deliveries: AfterAll kept nothing", at)
			}
			if runs != 0 {
				t.Fatalf("after %d of %d deliveries: ran early", i, n)
			}
			r.Deliver(i, i, nil)
		}
		if runs != 1 || !sawAll {
			t.Fatalf("AfterAll after %d deliveries: ran %d times, saw every call returned: %v", at, runs, sawAll)
		}
	}
	r := quorum.Begin[int](n)
	for i := range n {
		r.Deliver(i, i, nil)
	}
	if r.AfterAll(func() { t.Error("ran after every call had returned") }) {
		t.Fatal("every call had returned: AfterAll kept f")
	}

	for range 200 {
		r := quorum.Begin[int](n)
		ran := make(chan struct{}, n+1)
		done := make(chan struct{})
		for i := range n {
			go func() { r.Deliver(i, i, nil); done <- struct{}{} }()
		}
		if !r.AfterAll(func() { ran <- struct{}{} }) {
			ran <- struct{}{} // every call had returned: the caller goes on
		}
		for range n {
			<-done
		}
		if len(ran) != 1 {
			t.Fatalf("concurrent deliveries: ran %d times", len(ran))
		}
	}

	r = quorum.Begin[int](1)
	r.AfterAll(func() {})
	defer func() {
		if recover() == nil {
			t.Error("a second AfterAll on a round did not panic")
		}
	}()
	r.AfterAll(func() {})
}

// Returned turns true with the last delivery, and not before.
func TestReturnedAfterTheLastDelivery(t *testing.T) {
	const n = 3
	r := quorum.Begin[int](n)
	for i := range n {
		if r.Returned() {
			t.Fatalf("after %d of %d deliveries: Returned", i, n)
		}
		r.Deliver(i, i, nil)
	}
	if !r.Returned() {
		t.Fatal("every call delivered, yet not Returned")
	}
	if r.AfterAll(func() {}) {
		t.Fatal("AfterAll kept a func on a round that had returned")
	}
}

// DecideWithin waits past wait only when the nodes are late together (the
// caller's stall, most likely): none has replied by then, or the latest
// reply came in wait's second half; the others then get wait from the
// latest reply, within the grace. Where every reply came in wait's first
// half, a silent node fails at wait, as under Decide.
// Fake time (synctest) makes each moment exact.
func TestDecideWithinWaitsOnlyWhenEveryNodeIsLate(t *testing.T) {
	const wait, grace = 50 * time.Millisecond, 450 * time.Millisecond
	never := time.Duration(-1)
	for _, tc := range []struct {
		name    string
		replies []time.Duration // when each node replies (never: hung); odd nodes refuse
		grace   time.Duration
		wantAt  time.Duration
		wantWon bool
		late    bool
		errs    []error // each node's error, where it had not replied
	}{
		{"every reply late together is waited for", []time.Duration{80 * time.Millisecond, 80 * time.Millisecond, 80 * time.Millisecond}, grace, 80 * time.Millisecond, true, true, nil},
		{"without grace it is Decide", []time.Duration{80 * time.Millisecond, 80 * time.Millisecond, 80 * time.Millisecond}, 0, wait, false, false, []error{quorum.ErrNoReply, quorum.ErrNoReply, quorum.ErrNoReply}},
		{"a hung node among late ones gets wait from the first reply", []time.Duration{80 * time.Millisecond, 80 * time.Millisecond, never}, grace, 130 * time.Millisecond, false, true, []error{nil, nil, quorum.ErrNoReply}},
		{"a hung node among timely ones fails at wait", []time.Duration{time.Millisecond, time.Millisecond, never}, grace, wait, false, false, []error{nil, nil, quorum.ErrNoReply}},
		{"silence past the grace is every node late", []time.Duration{never, never, never}, grace, wait + grace, false, true, []error{quorum.ErrAllLate, quorum.ErrAllLate, quorum.ErrAllLate}},
		{"a hung node among slow ones gets wait from the latest reply", []time.Duration{40 * time.Millisecond, 30 * time.Millisecond, never}, grace, 90 * time.Millisecond, false, true, []error{nil, nil, quorum.ErrNoReply}},
		{"a hung node among replies in the first half of wait fails at wait", []time.Duration{25 * time.Millisecond, 20 * time.Millisecond, never}, grace, wait, false, false, []error{nil, nil, quorum.ErrNoReply}},
		{"a first reply near the grace's end leaves the others what is left", []time.Duration{490 * time.Millisecond, never, never}, grace, wait + grace, false, true, []error{nil, quorum.ErrNoReply, quorum.ErrNoReply}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				round := quorum.Start(len(tc.replies), func(i int) (bool, error) {
					if tc.replies[i] == never {
						<-release
						return true, nil
					}
					time.Sleep(tc.replies[i])
					return i%2 == 0, nil
				})
				start := time.Now()
				tally := round.DecideWithin(t.Context(), wait, tc.grace, func(v bool, err error) bool { return err == nil && v })
				if got := time.Since(start); got != tc.wantAt || tally.Won != tc.wantWon || tally.Late != tc.late {
					t.Errorf("won=%v late=%v after %v, want won=%v late=%v after %v", tally.Won, tally.Late, got, tc.wantWon, tc.late, tc.wantAt)
				}
				for i, want := range tc.errs {
					got := tally.Votes[i].Err
					if want == nil && got != nil || want != nil && !errors.Is(got, want) {
						t.Errorf("node %d: %v, want %v", i, got, want)
					}
					if want == quorum.ErrNoReply && errors.Is(got, quorum.ErrAllLate) {
						t.Errorf("node %d: %v: a node late among answering ones is not every node late", i, got)
					}
				}
				close(release)
				round.Wait()
			})
		})
	}
}
