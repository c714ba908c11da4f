// Package unsafelocker switches off, for one Locker, steps of the Redlock
// algorithm that make it safe, so that the simulator's negative controls
// (cmd/redlock-chaos -sim) can show what each step prevents: a control that
// sees nothing proves nothing. It is internal to the module: no user can
// make a Locker unsafe this way.
//
// The switches live in the Locker's copy of its Options (a field only
// package redlock can see), never in package-level variables, so unsafe
// and safe Lockers run side by side.
package unsafelocker

// Hooks are the steps a Locker skips. The zero value skips none.
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
}

// Any says whether h skips a step.
func (h Hooks) Any() bool { return h.ValidityFromReply || h.NoReleaseOnFailure }

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
