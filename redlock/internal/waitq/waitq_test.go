package waitq

import (
	"testing"
	"time"
)

func woken(w *Waiter) bool {
	select {
	case <-w.Wake:
		return true
	default:
		return false
	}
}

// Waiters are served in arrival order: the head moves up when the one
// before leaves, with a wake-up; a waiter behind the head is never woken
// by a release; after a win the next head learns the key is held until
// the release; a key no one waits for keeps nothing.
func TestQueueOrderAndWakeUps(t *testing.T) {
	var q Queues
	a, first, held, _ := q.Join("k")
	if !first || held {
		t.Fatalf("the first waiter: head %v, held %v", first, held)
	}
	b, first, _, _ := q.Join("k")
	c, _, _, _ := q.Join("k")
	if first || q.Waiting("k") != 3 {
		t.Fatalf("second waiter head %v; waiting %d", first, q.Waiting("k"))
	}
	q.Released("k", false)
	if !woken(a) || woken(b) || woken(c) {
		t.Fatal("a release wakes the head alone")
	}
	q.Leave("k", c, false) // behind the head: nobody moves up
	if woken(a) || woken(b) {
		t.Fatal("a waiter behind the head left: nobody is woken")
	}
	q.Leave("k", a, true) // the head won
	if !woken(b) {
		t.Fatal("the next waiter is woken when the head leaves")
	}
	if first, held := q.Head("k", b); !first || !held {
		t.Fatalf("after a win: head %v, held %v", first, held)
	}
	q.Released("k", false)
	if _, held := q.Head("k", b); held || !woken(b) {
		t.Fatal("the release clears held and wakes the head")
	}
	q.Released("k", false)
	q.Released("k", false)
	if !woken(b) || woken(b) {
		t.Fatal("wake-ups are kept, once: two releases, one signal")
	}
	q.Leave("k", b, false)
	if q.Waiting("k") != 0 || len(q.keys) != 0 {
		t.Fatalf("an empty queue keeps nothing: %d waiting, %d keys", q.Waiting("k"), len(q.keys))
	}
	q.Released("k", false) // no queue: nothing happens
	q.Leave("k", b, false) // twice: harmless
}

// A notice (a release elsewhere) wakes only the head, and also when a
// lease of this Locker was marked holding the key (it may have expired
// unreleased: the notice then says the key is free); nothing for a key no
// one waits for.
func TestNoticeWakesTheHead(t *testing.T) {
	var q Queues
	q.Notice("k", NamedNobody) // no one waits: nothing kept
	a, _, _, _ := q.Join("k")
	b, _, _, _ := q.Join("k")
	q.Notice("k", NamedNobody)
	if !woken(a) || woken(b) || a.Woken() != NamedNobody {
		t.Fatal("a notice wakes the head alone, and says so")
	}
	q.Notice("k", NamedOther)
	if woken(a) || woken(b) || a.Woken() != 0 {
		t.Fatal("a notice that named another Locker woke a waiter")
	}
	q.Notice("k", NamedThis)
	q.Notice("k", NamedNobody)
	if !woken(a) || woken(a) || a.Woken() != NamedThis|NamedNobody {
		t.Fatal("two notices: one wake-up, which says both")
	}
	q.Leave("k", a, true) // a won: held here
	if !woken(b) {
		t.Fatal("b moved up")
	}
	q.Notice("k", NamedNobody)
	if !woken(b) {
		t.Fatal("a notice after this Locker's lease (expired unreleased, say) did not wake the head")
	}
	if _, held := q.Head("k", b); held {
		t.Fatal("the notice left the key marked held here")
	}
}

// A release told again (its last nodes released too) wakes the head as a
// notice does, but not behind a lease of this Locker won since, which it
// leaves marked held; one that named another Locker wakes no one.
func TestNoticeAgainWakesTheHeadUnlessALeaseWonSince(t *testing.T) {
	var q Queues
	q.NoticeAgain("k", NamedThis) // no one waits: nothing kept
	a, _, _, _ := q.Join("k")
	b, _, _, _ := q.Join("k")
	q.NoticeAgain("k", NamedOther)
	if woken(a) || woken(b) {
		t.Fatal("a release told again that named another Locker woke a waiter")
	}
	q.NoticeAgain("k", NamedThis)
	if !woken(a) || woken(b) || a.Woken() != NamedThis {
		t.Fatal("a release told again did not wake the head alone, saying why")
	}
	q.Leave("k", a, true) // a won: held here
	if !woken(b) {
		t.Fatal("b moved up")
	}
	q.NoticeAgain("k", NamedNobody)
	if woken(b) {
		t.Fatal("an older release told again woke the head behind this Locker's lease")
	}
	if _, held := q.Head("k", b); !held {
		t.Fatal("an older release told again cleared held")
	}
}

// A release here that named another Locker's turn wakes the head to join
// the key's line (Passed), not to try; one that named no one, to try.
func TestReleasedSaysWhetherTheTurnPassed(t *testing.T) {
	var q Queues
	a, _, _, _ := q.Join("k")
	b, _, _, _ := q.Join("k")
	q.Leave("k", a, true) // a won: held here
	if !woken(b) || b.Woken() != 0 {
		t.Fatal("b moved up, with no release")
	}
	if _, held := q.Head("k", b); !held {
		t.Fatal("b is behind a lease of this Locker: held")
	}
	q.Released("k", true)
	if !woken(b) || b.Woken() != Passed {
		t.Fatal("the turn passed to another Locker: the head is told so")
	}
	if _, held := q.Head("k", b); held {
		t.Fatal("released: held no longer")
	}
	q.Released("k", false)
	if !woken(b) || b.Woken() != ReleasedHere {
		t.Fatal("a release that named no one: the head tries")
	}
}

// A release that passed the turn to another Locker while no one waited
// here keeps the next Lock call for the key out of the way for PassedFor:
// its Join says passed (it joins the key's line and waits instead of
// racing the named Locker's attempt). Once only, and not after PassedFor;
// a release that named no one, or PassedFor 0, marks nothing.
func TestAPassedTurnHoldsBackTheNextLock(t *testing.T) {
	q := &Queues{PassedFor: time.Hour}
	q.Released("k", true) // no one waits: the mark is kept
	w, first, held, passed := q.Join("k")
	if !first || held || !passed {
		t.Fatalf("after a passed turn: first %v held %v passed %v, want true false true", first, held, passed)
	}
	q.Leave("k", w, false)
	if _, _, _, passed := q.Join("k"); passed {
		t.Error("the mark is taken once")
	}
	q.Released("j", false)
	if _, _, _, passed := q.Join("j"); passed {
		t.Error("a release that named no one marks nothing")
	}
	short := &Queues{PassedFor: time.Nanosecond}
	short.Released("k", true)
	time.Sleep(time.Millisecond) // past PassedFor
	if _, _, _, passed := short.Join("k"); passed {
		t.Error("the mark lasts PassedFor")
	}
	var off Queues
	off.Released("k", true)
	if _, _, _, passed := off.Join("k"); passed {
		t.Error("PassedFor 0: no marks")
	}
}
