package main

import (
	"html"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = time.Millisecond

// section appends one critical section to h: a lease of client on key 0
// from acquired to until, a read of read at r and a write of read+1 at w.
func section(h *history, client int, acquired, until, r, w time.Duration, read int64, accepted bool) {
	li := len(h.leases)
	h.leases = append(h.leases, leaseRecord{Client: client, Call: acquired - ms, Acquired: acquired, Until: until, Released: w + ms})
	h.accesses = append(h.accesses,
		access{Lease: li, Call: r, Return: r + ms, Value: read, Accepted: true},
		access{Lease: li, Write: true, Call: w, Return: w + ms, Value: read + 1, Accepted: accepted})
}

func TestRefereeOnSerialSections(t *testing.T) {
	h := &history{}
	section(h, 0, 0, 100*ms, 10*ms, 20*ms, 0, true)
	section(h, 1, 30*ms, 130*ms, 40*ms, 50*ms, 1, true)
	c := referee(config{keys: 1}, h)
	c.lostIncrements(h, []int64{2})
	assert.Zero(t, c.Overlaps)
	assert.Zero(t, c.StaleAccepted)
	assert.Zero(t, c.LostIncrements)
	assert.Equal(t, 2, c.Accepted)
	res, _ := porcupine.CheckOperationsVerbose(counterModel.ToModel(), increments(h), time.Second)
	assert.Equal(t, porcupine.Ok, res)
}

// The Kleppmann scenario without fencing: client 0 reads, pauses past its
// lease; client 1 takes the lock, increments; client 0 wakes and writes its
// stale value, accepted.
func TestRefereeSeesAPausedHolder(t *testing.T) {
	h := &history{}
	section(h, 0, 0, 100*ms, 10*ms, 300*ms, 0, true)       // paused from 11ms to 300ms
	section(h, 1, 150*ms, 250*ms, 160*ms, 170*ms, 0, true) // the counter still held 0
	section(h, 1, 180*ms, 280*ms, 190*ms, 200*ms, 1, true)
	c := referee(config{keys: 1}, h)
	c.lostIncrements(h, []int64{1})
	assert.Zero(t, c.Overlaps, "the paused holder's window ended at 100ms")
	assert.Equal(t, 1, c.LateWrites)
	assert.Equal(t, 1, c.LateAccepted)
	assert.Equal(t, 1, c.StaleAccepted, "client 0's write after client 1's")
	assert.Equal(t, 2, c.LostIncrements, "three accepted, the counter shows one")
	res, _ := porcupine.CheckOperationsVerbose(counterModel.ToModel(), increments(h), time.Second)
	assert.Equal(t, porcupine.Illegal, res)

	// With fencing, the stale write is refused: linearizable, nothing lost.
	h.accesses[1].Accepted = false
	c = referee(config{keys: 1}, h)
	c.lostIncrements(h, []int64{2})
	assert.Zero(t, c.StaleAccepted)
	assert.Zero(t, c.LostIncrements)
	assert.Equal(t, 1, c.Rejected)
	res, _ = porcupine.CheckOperationsVerbose(counterModel.ToModel(), increments(h), time.Second)
	assert.Equal(t, porcupine.Ok, res)
}

func TestRefereeCountsOverlappingWindows(t *testing.T) {
	h := &history{}
	section(h, 0, 0, 100*ms, 10*ms, 20*ms, 0, true)
	h.leases[0].Released = 0 // never released: believed to 100ms
	section(h, 1, 50*ms, 150*ms, 60*ms, 70*ms, 1, true)
	section(h, 2, 120*ms, 220*ms, 130*ms, 140*ms, 2, true)
	c := referee(config{keys: 1}, h)
	assert.Equal(t, 1, c.Overlaps, "client 1's lease began inside client 0's; client 2's after client 1 released")
	assert.Len(t, c.Marks, 2)
}

// A lease that Do extended is believed to its extended validity: a lease
// of another client granted inside it overlaps, and its write before the
// extended end is not late; released first, it overlaps nothing.
func TestRefereeBelievesAnExtendedLeaseToItsLastValidity(t *testing.T) {
	h := &history{}
	section(h, 0, 0, 100*ms, 10*ms, 150*ms, 0, true) // written at 150ms, under an extension to 200ms
	h.leases[0].Extended = 200 * ms
	h.leases[0].Released = 0 // never released: believed to 200ms
	section(h, 1, 180*ms, 280*ms, 190*ms, 195*ms, 1, true)
	c := referee(config{keys: 1}, h)
	assert.Equal(t, 1, c.Overlaps, "client 1 was granted at 180ms, inside client 0's extended validity")
	assert.Zero(t, c.LateWrites, "the write at 150ms came before the extended end")
	h.leases[0].Released = 151 * ms
	c = referee(config{keys: 1}, h)
	assert.Zero(t, c.Overlaps, "released at 151ms")
	h.leases[0].Extended = 0
	c = referee(config{keys: 1}, h)
	assert.Equal(t, 1, c.LateWrites, "without the extension, the write at 150ms is past the 100ms validity")
}

func TestModelOfAnUnknownWrite(t *testing.T) {
	h := &history{}
	section(h, 0, 0, 100*ms, 10*ms, 20*ms, 0, false)
	h.accesses[1].Unknown = true
	section(h, 1, 30*ms, 130*ms, 40*ms, 50*ms, 1, true) // the unknown write landed
	res, _ := porcupine.CheckOperationsVerbose(counterModel.ToModel(), increments(h), time.Second)
	assert.Equal(t, porcupine.Ok, res)
	h.accesses[1].Unknown = false // a refused write cannot have landed
	res, _ = porcupine.CheckOperationsVerbose(counterModel.ToModel(), increments(h), time.Second)
	assert.Equal(t, porcupine.Illegal, res)
}

func TestPlanIsTheSeeds(t *testing.T) {
	cfg := config{seed: 42, clients: 3, nodes: 5, ttl: time.Second, duration: time.Minute, faultEvery: 2 * time.Second, faults: faultKinds}
	a, b := plan(cfg), plan(cfg)
	require.Equal(t, a, b)
	require.NotEmpty(t, a)
	for _, f := range a {
		assert.Less(t, f.At, cfg.duration)
		if f.Kind == "pause" {
			assert.Equal(t, -1, f.Node)
			assert.Less(t, f.Client, cfg.clients)
			assert.Greater(t, f.For, cfg.ttl, "a pause outlasts the lease")
		} else {
			assert.Equal(t, -1, f.Client)
			assert.Less(t, f.Node, cfg.nodes)
		}
	}
	cfg.seed = 43
	assert.NotEqual(t, a, plan(cfg))
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-config", "maybe"}, {"-faults", "meteor"}, {"-clients", "0"}, {"-ttl", "1ms"},
		{"-lockers", "9", "-clients", "2"}, {"-hold", "600ms"}, {"-hold", "-1ms"}, {"-hold", "soon"}, {"-duration", "0s"}, {"extra"},
	} {
		_, err := parseFlags(args, discard{})
		var u usageError
		require.ErrorAs(t, err, &u, "%v", args)
	}
}

// -h says each default once: -hold's is a quarter of -ttl, which the usage
// text gives, never a sentinel value's "(default -1ns)".
func TestHelpSaysEachDefaultOnce(t *testing.T) {
	var help strings.Builder
	_, err := parseFlags([]string{"-h"}, &help)
	require.Error(t, err)
	require.Contains(t, help.String(), "(default: a quarter of -ttl)")
	require.NotContains(t, help.String(), "(default -1ns)")
	require.NotContains(t, help.String(), "-ttl) (default")

	cfg, err := parseFlags([]string{"-ttl", "2s"}, discard{})
	require.NoError(t, err)
	require.Equal(t, 500*time.Millisecond, cfg.hold, "unset: a quarter of -ttl")
	cfg, err = parseFlags([]string{"-ttl", "2s", "-hold", "0s"}, discard{})
	require.NoError(t, err)
	require.Zero(t, cfg.hold, "set to zero: zero")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestAttribute(t *testing.T) {
	ttl := 100 * ms
	faults := []fault{
		{Kind: "outage", Began: 0, Ended: 50 * ms},
		{Kind: "outage", Began: 1000 * ms, Ended: 1050 * ms},
		{Kind: "pause", Began: 2000 * ms, Ended: 2150 * ms},
		{Kind: "kill", Began: -1, Ended: -1}, // not carried out
	}
	marks := []mark{
		{Kind: "overlap", At: int64(60 * ms)}, {Kind: "overlap", At: int64(60 * ms)}, // one pair
		{Kind: "stale", At: int64(2200 * ms)},
		{Kind: "stale", At: int64(3000 * ms)}, // after every window
	}
	got := attribute(faults, marks, ttl)
	assert.Equal(t, []trials{
		{Kind: "outage", Faults: 2, Overlapped: 1},
		{Kind: "pause", Faults: 1, Stale: 1},
	}, got)
}

// The Kleppmann scenario where the newer holder was already waiting in Lock
// when the paused one acquired: its winning attempt began after, which its
// validity shows (it ends at most a TTL after the attempt began).
func TestRefereeSeesAStaleWriteAfterAWaitingClient(t *testing.T) {
	for _, call := range []time.Duration{120 * ms, 5 * ms} {
		t.Run(call.String(), func(t *testing.T) {
			h := &history{}
			section(h, 0, 10*ms, 110*ms, 20*ms, 300*ms, 0, true) // paused from 21ms to 300ms
			section(h, 1, 150*ms, 250*ms, 160*ms, 170*ms, 0, true)
			h.leases[1].Call = call // 5ms: waiting in Lock since before client 0 acquired
			c := referee(config{keys: 1, ttl: 100 * ms}, h)
			c.lostIncrements(h, []int64{1})
			assert.Equal(t, 1, c.LostIncrements)
			assert.Equal(t, 1, c.StaleAccepted, "client 0's write after client 1's accesses")
			got := attribute([]fault{{Kind: "pause", Client: 0, Began: 21 * ms, Ended: 300 * ms}}, c.Marks, 100*ms)
			assert.Equal(t, []trials{{Kind: "pause", Faults: 1, Stale: 1}}, got)
		})
	}
	// The control: a lease whose attempt may have begun before client 0
	// acquired (its validity ends within a TTL of that) is not newer.
	h := &history{}
	section(h, 0, 10*ms, 110*ms, 20*ms, 300*ms, 0, true)
	section(h, 1, 50*ms, 100*ms, 60*ms, 70*ms, 0, true)
	h.leases[1].Call = 5 * ms
	c := referee(config{keys: 1, ttl: 100 * ms}, h)
	assert.Zero(t, c.StaleAccepted)
}

// A majority's fault is drawn on each of its nodes' rows, not on a client's.
func TestTimelineDrawsAMajorityFaultOnItsNodes(t *testing.T) {
	r := &result{Duration: time.Second, Faults: []fault{
		{Kind: "outage", Node: -1, Client: -1, Nodes: []int{0, 2, 3}, Began: 100 * ms, Ended: 200 * ms},
		{Kind: "pause", Node: -1, Client: 1, Began: 300 * ms, Ended: 400 * ms},
	}}
	path := t.TempDir() + "/t.svg"
	require.NoError(t, writeTimeline(path, r))
	svg, err := os.ReadFile(path)
	require.NoError(t, err)
	title := html.EscapeString(r.Faults[0].String())
	assert.Equal(t, 3, strings.Count(string(svg), "<title>"+title+"</title>"), "one box per node")
	assert.Equal(t, 1, strings.Count(string(svg), "<title>"+html.EscapeString(r.Faults[1].String())+"</title>"))
}

// Every kind of fault has a colour of its own on the timeline (a missing
// one is drawn black, like a write).
func TestEveryFaultHasAColour(t *testing.T) {
	for _, k := range faultKinds {
		assert.NotEmpty(t, faultColours[k], "no colour for %s", k)
	}
}

// Every kind of fault says what it does to a node it strikes.
func TestEveryFaultActsOnNodes(t *testing.T) {
	for _, k := range faultKinds {
		if k != "pause" { // a client's
			assert.NotEmpty(t, nodeFault[k], "%s does nothing to a node", k)
		}
	}
}
