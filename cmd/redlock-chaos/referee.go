package main

import (
	"slices"
	"time"
)

// counts is the referee's tally of a run.
type counts struct {
	Leases int `json:"leases"`
	// MultiKey are leases of two keys at once (each key's record counts
	// in Leases), Do those taken by Locker.Do, and Extended those of Do
	// that its extensions kept past their first validity (-mixed).
	MultiKey int `json:"multi_key,omitempty"`
	Do       int `json:"do,omitempty"`
	Extended int `json:"extended,omitempty"`
	// LongestWait is the longest a successful Lock call waited: liveness
	// under the faults.
	LongestWait time.Duration `json:"longest_wait"`
	// Overlaps is how many pairs of leases of one key had validity windows
	// (acquisition to the end the client believed, or its release) that
	// overlapped: two clients believing they held one lock at once.
	Overlaps int `json:"overlaps"`
	// LateWrites are writes sent after the writer's lease had run out;
	// LateAccepted those the resource took.
	LateWrites   int `json:"late_writes"`
	LateAccepted int `json:"late_accepted"`
	// StaleAccepted are accesses the resource took after it had taken an
	// access from a newer lease of the same key (see newer), in real-time
	// order: what fencing exists to refuse.
	StaleAccepted int `json:"stale_accepted"`
	// StaleSameToken are the stale accesses accepted whose newer lease
	// carried the very same token: a token issued twice, which happens
	// when a majority of nodes lost their fencing counters (outside
	// fencing's guarantee: see docs/failure-models.md, "Fencing tokens")
	// and the counters climbed back to a token an older holder still
	// used.
	StaleSameToken int `json:"stale_same_token,omitempty"`
	// Rejected are writes refused as stale (fencing at work).
	Rejected int `json:"rejected"`
	// Accepted increments, and how many of them the final counters lack;
	// Unknown are writes whose outcome the client never learned, which
	// widen what the counters may show.
	Accepted       int `json:"accepted"`
	Unknown        int `json:"unknown"`
	LostIncrements int `json:"lost_increments"`
	KeysLeft       int `json:"keys_left"`
	// KeysAtEnd are lock keys on the nodes when the clients stopped and
	// the Lockers drained, after a quiet spell of three TTLs with no fault
	// (simulation only): every lease was released by then, and every
	// failed attempt's grants too, so there should be none.
	KeysAtEnd int `json:"keys_at_end,omitempty"`
	// PastBound of BoundedCalls lock calls (Lock, Unlock) returned later
	// than their deadline plus boundSlack.
	PastBound    int `json:"past_bound"`
	BoundedCalls int `json:"bounded_calls"`
	// Marks are the violations, for the timeline.
	Marks []mark `json:"-"`
}

// mark is one violation on the timeline.
type mark struct {
	Kind   string // "overlap", "stale"
	Client int
	At     int64 // nanoseconds from the start
	Until  int64
}

// referee judges the leases and the accesses. Every time is a reading of one
// process's monotonic clock, so real-time order between clients is exact.
func referee(cfg config, h *history) counts {
	c := counts{Leases: len(h.leases)}
	for _, l := range h.leases {
		c.LongestWait = max(c.LongestWait, l.Acquired-l.Call)
		switch l.Shape {
		case "multi":
			c.MultiKey++
		case "do":
			c.Do++
			if l.Extended > 0 {
				c.Extended++
			}
		}
	}
	c.MultiKey /= 2 // a record per key
	// Overlapping beliefs, per key.
	byKey := make([][]int, cfg.keys)
	for i, l := range h.leases {
		byKey[l.Key] = append(byKey[l.Key], i)
	}
	for _, ids := range byKey {
		slices.SortFunc(ids, func(a, b int) int { return int(h.leases[a].Acquired - h.leases[b].Acquired) })
		for x, i := range ids {
			a := h.leases[i]
			for _, j := range ids[x+1:] {
				b := h.leases[j]
				if b.Acquired >= a.end() {
					break // sorted by acquisition: no later one overlaps a
				}
				c.Overlaps++
				c.Marks = append(c.Marks,
					mark{Kind: "overlap", Client: a.Client, At: int64(b.Acquired), Until: int64(min(a.end(), b.end()))},
					mark{Kind: "overlap", Client: b.Client, At: int64(b.Acquired), Until: int64(min(a.end(), b.end()))})
			}
		}
	}
	// Writes, late and stale.
	accByKey := make([][]access, cfg.keys)
	for _, a := range h.accesses {
		l := h.leases[a.Lease]
		accByKey[l.Key] = append(accByKey[l.Key], a)
		if !a.Write {
			continue
		}
		switch {
		case a.Accepted:
			c.Accepted++
		case a.Unknown:
			c.Unknown++
		default:
			c.Rejected++
		}
		if a.Call > l.believed() {
			c.LateWrites++
			if a.Accepted {
				c.LateAccepted++
			}
		}
	}
	for _, accs := range accByKey {
		// For each accepted access x, was an accepted access y of a newer
		// lease answered before x was sent?
		for _, x := range accs {
			if !x.Accepted {
				continue
			}
			lx := h.leases[x.Lease]
			for _, y := range accs {
				ly := h.leases[y.Lease]
				if y.Accepted && y.Return < x.Call && newer(ly, lx, cfg.ttl) && y.Lease != x.Lease {
					c.StaleAccepted++
					if lx.Token != 0 && lx.Token == ly.Token {
						c.StaleSameToken++
					}
					c.Marks = append(c.Marks, mark{Kind: "stale", Client: lx.Client, At: int64(x.Call), Until: int64(x.Return)})
					break
				}
			}
		}
	}
	return c
}

// newer reports whether lease y's winning attempt began after lease x was
// acquired, so that y's token is the higher (the token order): when y's
// Lock call began after that, or when y's validity, which ends at most a
// TTL after its winning attempt began, ends more than a TTL after x was
// acquired. The second catches a client that was already waiting in Lock,
// retrying, when x was granted, the usual case under contention. (A TTL
// of 0, in tests, leaves only the first.)
func newer(y, x leaseRecord, ttl time.Duration) bool {
	return y.Call > x.Acquired || ttl > 0 && y.Until-ttl > x.Acquired
}

// lostIncrements compares the accepted increments with the final counters.
// Writes with an unknown outcome may or may not have landed; a counter
// short of even the accepted ones lost increments for sure.
func (c *counts) lostIncrements(h *history, final []int64) {
	accepted := make([]int64, len(final))
	for _, a := range h.accesses {
		if a.Write && a.Accepted {
			accepted[h.leases[a.Lease].Key]++
		}
	}
	for k := range final {
		if lost := accepted[k] - final[k]; lost > 0 {
			c.LostIncrements += int(lost)
		}
	}
}

// trials counts, for each kind of fault, how many were carried out and how
// many were followed by each kind of violation: each fault is one trial of
// its failure model.
type trials struct {
	Kind       string `json:"kind"`
	Faults     int    `json:"faults"`
	Overlapped int    `json:"overlapped"` // followed by overlapping leases
	Stale      int    `json:"stale"`      // followed by a stale access accepted
}

// attribute charges each violation to the faults whose window it falls in:
// from the fault's start to two TTLs after its end, long enough for a lease
// granted during the fault to run out. Faults close together share their
// violations; a run of one kind of fault, spaced out, gives clean counts.
func attribute(faults []fault, marks []mark, ttl time.Duration) []trials {
	var out []trials
	index := map[string]int{}
	for _, f := range faults {
		if f.Began < 0 || f.Err != "" {
			continue // not carried out, or not wholly: no trial
		}
		i, ok := index[f.Kind]
		if !ok {
			i = len(out)
			index[f.Kind] = i
			out = append(out, trials{Kind: f.Kind})
		}
		out[i].Faults++
		from, to := int64(f.Began), int64(f.Ended+2*ttl)
		overlapped, stale := false, false
		for _, m := range marks {
			if m.At < from || m.At > to {
				continue
			}
			switch m.Kind {
			case "overlap":
				overlapped = true
			case "stale":
				stale = true
			}
		}
		if overlapped {
			out[i].Overlapped++
		}
		if stale {
			out[i].Stale++
		}
	}
	slices.SortFunc(out, func(a, b trials) int {
		return slices.Index(simFaultKinds, a.Kind) - slices.Index(simFaultKinds, b.Kind)
	})
	return out
}
