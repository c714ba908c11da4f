package redlock

import (
	_ "embed"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/redlock/redlock/redlock/internal/notice"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// Every script the coordinator sends, each with its embedded source and,
// where a Redis Cluster slot in migration may refuse the lease's other
// keys, its single-key form (below); the guard's scripts are beside it
// (internal/guard). Each names the commands it calls, for the errors of a
// node whose access control list refuses one (docs/operations.md). One
// script per operation serves every lease, of one key or of several (the
// scripts take n keys); only the unfenced acquisition of one key is no
// script at all (SET NX PX GET).
var (
	//go:embed scripts/acquire.lua
	acquireLua    string
	acquireScript = wire.NewScript("acquire", "GET, SET, INCR", acquireLua)

	//go:embed scripts/release.lua
	releaseLua    string
	releaseScript = singleKey(wire.NewScript("release", "GET, DEL", releaseLua), releaseWithoutLine)

	//go:embed scripts/join.lua
	joinLua    string
	joinScript = wire.NewScript("join", "LPOS, RPUSH, PEXPIRE", joinLua)

	//go:embed scripts/extend.lua
	extendLua    string
	extendScript = singleKey(wire.NewScript("extend", "GET, PEXPIRE, SET", extendLua), extendWithoutTombstones)

	//go:embed scripts/check.lua
	checkLua    string
	checkScript = singleKey(wire.NewScript("check", "GET", checkLua), checkWithoutTombstones)

	//go:embed scripts/fence.lua
	fenceLua    string
	fenceScript = wire.NewScript("fence", "GET, SET", fenceLua)

	//go:embed scripts/record.lua
	recordLua    string
	recordScript = wire.NewScript("token record", "GET, SET", recordLua)

	//go:embed scripts/revoke.lua
	revokeLua    string
	revokeScript = wire.NewScript("revoke", "GET, PTTL, DEL, SET", revokeLua)

	//go:embed scripts/inspect.lua
	inspectLua    string
	inspectScript = wire.NewScript("inspect", "GET, PTTL", inspectLua)

	//go:embed scripts/resume.lua
	resumeLua    string
	resumeScript = wire.NewScript("resume", "GET, PTTL", resumeLua)
)

// warmScripts are the scripts Warm loads: every one the coordinator sends.
var warmScripts = []*wire.Script{releaseScript, joinScript, extendScript, checkScript, acquireScript, fenceScript, recordScript}

// singleKey gives s its single-key form (wire.Script.SingleKey).
func singleKey(s *wire.Script, form func(wire.Command) wire.Command) *wire.Script {
	s.SingleKey = form
	return s
}

// leaseKeys is how many of a lease command's keys are the lease's own:
// the rest are names beside them (tombstones, a line).
func leaseKeys(c wire.Command) int { return max(int(c.OrderKeys), 1) }

// checkWithoutTombstones is the check script's single-key form, sent where
// a Redis Cluster refused the lease's key with its tombstone with TRYAGAIN
// (the slot migrates, and the node holds the key alone, or neither): the
// lease's keys alone. A missing key then reads as missing, not as revoked.
func checkWithoutTombstones(c wire.Command) wire.Command {
	c.Keys = c.Keys[:leaseKeys(c)]
	return c
}

// releaseWithoutLine is the release script's single-key form (see
// checkWithoutTombstones): the lease's key alone, without its line of
// waiting Lockers, which a migrating slot may hold on the other node. The
// release still publishes (the channel is an argument), naming nobody's
// turn: every waiter may try, as when no Locker is in line.
func releaseWithoutLine(c wire.Command) wire.Command {
	c.Keys = c.Keys[:leaseKeys(c)]
	return c
}

// extendWithoutTombstones is the extend script's single-key form (see
// checkWithoutTombstones), which never heals: a missing key may have been
// revoked, and only the tombstone would say so. The extension heals again
// once the slot has settled.
func extendWithoutTombstones(c wire.Command) wire.Command {
	c.Keys = c.Keys[:leaseKeys(c)]
	argv := slices.Clone(c.Argv) // value, milliseconds, heal, n
	argv[2] = "0"
	c.Argv = argv
	return c
}

// The commands of the lease scripts, for a lease of one key or of several:
// the lease's keys come first (the first n of Keys, which the pipeline
// keeps in order against: wire.Command.Across where n > 1), then the names
// beside them that the script reads or writes.

// width is how many keys the request's lease has.
func (r request) width() int { return max(len(r.multi), 1) }

// appendKeys appends the request's keys to dst.
func (r request) appendKeys(dst []string) []string {
	if r.multi == nil {
		return append(dst, r.key)
	}
	return append(dst, r.multi...)
}

// appendBeside appends, for each of the request's keys, the name beside it
// (one) or them (many: the multi-key request's, in its keys' order).
func (r request) appendBeside(dst []string, one string, many []string) []string {
	if r.multi == nil {
		return append(dst, one)
	}
	return append(dst, many...)
}

// across orders c against its first n keys where it has several.
func across(c wire.Command, n int) wire.Command {
	if n > 1 {
		return c.Across(n)
	}
	return c
}

// acquisition is an attempt's command and how its replies are read, with
// where the phase-1 fencing counters go (nil without fencing): per node,
// one per key. One unfenced key is SET NX PX GET; anything else is the
// acquire script, all or nothing over the keys, which also increments
// each key's fencing counter where the lease is fenced.
func (l *Locker) acquisition(req request, value string) (wire.Command, reader, []uint64) {
	fenced := req.counter != "" || req.counters != nil
	if req.multi == nil && !fenced {
		return acquireCommand(req.key, value, req.ms), readAcquire, nil
	}
	n := req.width()
	keys := req.multi // unfenced, the lease's keys alone: no copy
	argv := make([]any, 0, 4)
	argv = append(argv, value, req.ms, n)
	if fenced {
		keys = req.appendBeside(req.appendKeys(make([]string, 0, 2*n)), req.counter, req.counters)
		argv = append(argv, "fence")
	}
	c := across(wire.ScriptCommand(acquireScript, keys, argv...), n).Of(value, wire.RoleSets).Replicated().GuardedBy()
	if fenced {
		return c, readFenced, make([]uint64, len(l.nodes)*n)
	}
	return c, readScript, nil
}

// readFenced reads a fenced acquisition's reply, storing node i's
// counters, one per key of the lease, in b.counters[i*n:(i+1)*n].
func readFenced(b *ballot, i int, cmd *redis.Cmd) (Outcome, error) {
	res, err := cmd.Slice()
	if err != nil {
		return Failed, err
	}
	n := len(b.counters) / len(b.nodes)
	if len(res) == 0 {
		return Failed, fmt.Errorf("redlock: unexpected fencing reply %v", res)
	}
	if code, _ := res[0].(int64); code != 1 {
		return Taken, nil
	}
	if len(res) != n+1 {
		return Failed, fmt.Errorf("redlock: unexpected fencing reply %v", res)
	}
	for k := range n {
		s, _ := res[k+1].(string)
		c, err := strconv.ParseUint(s, 10, 64)
		if err != nil || c > maxCounter {
			return Failed, fmt.Errorf("redlock: fencing counter %q on the node is not usable", s)
		}
		b.counters[i*n+k] = c
	}
	return Granted, nil
}

// releaseCommand is the compare-and-delete of a lease's value on key, or
// on every key of multi (a multi-key lease). notify asks the script to
// publish the release on each key's channel (a lease's Unlock: see
// Locker.release), and, for one key, to name the next Locker in the key's
// line, other than this one. A key that cannot carry a hash tag has
// neither channel nor line: its release publishes nothing there.
func (l *Locker) releaseCommand(key string, multi []string, value string, notify bool) (wire.Command, reader) {
	req := request{key: key, multi: multi}
	n := req.width()
	keys := multi // several keys: the lease's own, no copy (the script only reads them)
	if multi == nil {
		keys = make([]string, 1, 2) // the key, and for an Unlock its line
		keys[0] = key
	}
	if !notify {
		return across(wire.ScriptCommand(releaseScript, keys, value), n), readScript
	}
	argv := make([]any, 0, 3+n)
	argv = append(argv, value, notifyArg, l.id)
	for _, k := range keys {
		channel, _ := notice.Channel(k) // "" for a key that cannot carry a hash tag
		argv = append(argv, channel)
	}
	if line, ok := notice.Line(key); ok && multi == nil {
		keys = append(keys, line)
	}
	return across(wire.ScriptCommand(releaseScript, keys, argv...), n), readRelease
}

// phase2Command is fencing phase 2 for req: the counters of its keys
// raised to ts while the lease holds them, and the lease's tokens
// recorded beside them (fence.lua).
func phase2Command(req request, value string, ts []uint64, tokens []uint64) wire.Command {
	n := req.width()
	keys := req.appendKeys(make([]string, 0, 3*n))
	keys = req.appendBeside(keys, req.counter, req.counters)
	keys = req.appendBeside(keys, req.record, req.records)
	argv := make([]any, 0, 1+2*n)
	argv = append(argv, value)
	for _, t := range ts {
		argv = append(argv, strconv.FormatUint(t, 10))
	}
	for _, tok := range tokens {
		argv = append(argv, strconv.FormatUint(tok, 10))
	}
	return across(wire.ScriptCommand(fenceScript, keys, argv...), n).Of(value, wire.RoleFences).Replicated()
}

// tokenRecordCommand records a lease's tokens beside its keys' fencing
// counters, as "token value" (the form fence.lua writes), where each key
// still holds the value (record.lua): the fast path's record, sent
// unawaited.
func tokenRecordCommand(req request, value string, tokens []uint64) wire.Command {
	n := req.width()
	keys := req.appendKeys(make([]string, 0, 2*n))
	keys = req.appendBeside(keys, req.record, req.records)
	argv := make([]any, 0, 1+n)
	argv = append(argv, value)
	for _, tok := range tokens {
		argv = append(argv, strconv.FormatUint(tok, 10))
	}
	return across(wire.ScriptCommand(recordScript, keys, argv...), n)
}

// scriptKeys are the keys the extend and check scripts read: the lease's
// keys, then their revocation tombstones where every key can carry a hash
// tag (a multi-key lease's can: multiRequest checked). Computed once per
// lease; l.op is held.
func (l *Lease) scriptKeys() []string {
	if l.script != nil {
		return l.script
	}
	n := len(l.keys)
	all := make([]string, 0, 2*n)
	all = append(all, l.keys...)
	for _, k := range all[:n] {
		tomb, err := tombstoneKey(k)
		if err != nil {
			l.script = all[:n] // no tombstones: the keys alone
			return l.script
		}
		all = append(all, tomb)
	}
	l.script = all
	return l.script
}

// extendCommand is the lease's extension to ms milliseconds, healing
// missing keys with heal "1". l.op is held.
func (l *Lease) extendCommand(ms int64, heal string) wire.Command {
	n := len(l.keys)
	c := wire.ScriptCommand(extendScript, l.scriptKeys(), l.value, ms, heal, n)
	return across(c, n).Of(l.value, wire.RoleExtends).Replicated().GuardedBy()
}

// checkCommand is the lease's check. l.op is held.
func (l *Lease) checkCommand() wire.Command {
	n := len(l.keys)
	return across(wire.ScriptCommand(checkScript, l.scriptKeys(), l.value, n).GuardedBy(), n)
}
