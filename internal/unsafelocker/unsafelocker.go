// Package unsafelocker switches off, for one Locker, steps of the Redlock
// algorithm that make it safe or live, so that the negative controls (the
// simulator's, cmd/redlock-chaos -sim, and the package's own tests) can
// show what each step prevents: a control that sees nothing proves
// nothing. It is internal to the module: no user can make a Locker unsafe
// this way.
//
// The switches live in the Locker's copy of its Options (a field only
// package redlock can see), never in package-level variables, so unsafe
// and safe Lockers run side by side, and tests that set them run in
// parallel.
package unsafelocker

// Hooks are the steps a Locker skips, and the points where a test acts.
// The zero value skips none and acts nowhere.
type Hooks struct {
	// ValidityFromReply counts a lease's validity from the moment the
	// quorum answered, in full (no elapsed time, no drift allowance), and
	// never refuses a won round for having no validity left: the bug of
	// clients that time a lease from the reply instead of from before the
	// first send.
	ValidityFromReply bool
	// NoReleaseOnFailure leaves a failed attempt's keys on the nodes that
	// granted them, instead of releasing them at once: they block every
	// client until they expire.
	NoReleaseOnFailure bool
	// NoFencingPhase2 takes a fenced lease's token from the phase-1
	// counters' maximum alone, never raising the counters that lag: tokens
	// can then repeat or go backwards.
	NoFencingPhase2 bool
	// AlwaysFencingPhase2 runs phase 2 on every fenced acquisition (the
	// one-round-trip fast path off): safe, slower; for the tests that
	// compare the two.
	AlwaysFencingPhase2 bool
	// UnconditionalTrust makes TrustNewNodes trust every node it checked,
	// whatever changed on it since the check.
	UnconditionalTrust bool
	// NoLines keeps the Locker out of keys' lines of waiting Lockers: a
	// release then names nobody, and turns are not kept.
	NoLines bool
	// NoSplitBackoff drops the growing wait after attempts that split the
	// nodes, so that contenders can keep each other out in step.
	NoSplitBackoff bool
	// NoRetryAfterListen drops the attempt that follows Lock's subscription
	// to the key's release notices: a release between the first attempt
	// and the subscription is then missed.
	NoRetryAfterListen bool
	// BeforeListen, where set, runs between Lock's first failed attempt
	// and its subscription (the missed-release test's point to act). A
	// pointer, not a func, so that Hooks, and the redlock.Options that
	// holds it, stay comparable.
	BeforeListen *func()
}

// Any says whether h skips a step or acts somewhere. (Hooks is
// comparable: BeforeListen is a pointer.)
func (h Hooks) Any() bool { return h != Hooks{} }

// apply is installed by package redlock (which this package may not
// import): it stores the hooks in the *redlock.Options it is given.
var apply func(opts any, h Hooks)

// Register installs package redlock's setter; it is called once, from that
// package's init.
func Register(set func(opts any, h Hooks)) { apply = set }

// Set makes every Locker built from opts (a *redlock.Options) skip the
// steps h names.
func Set(opts any, h Hooks) {
	if apply == nil {
		panic("unsafelocker: package redlock is not linked in")
	}
	apply(opts, h)
}
