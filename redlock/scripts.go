package redlock

import (
	_ "embed"
	"slices"

	"github.com/redlock/redlock/redlock/internal/wire"
)

// Every script the coordinator sends, each with its embedded source and,
// where a Redis Cluster slot in migration may refuse the lease's other
// keys, its single-key form (below); the guard's scripts are beside it
// (internal/guard). Each names the commands it calls, for the errors of a
// node whose access control list refuses one (docs/operations.md).
var (
	//go:embed scripts/release.lua
	releaseLua    string
	releaseScript = singleKey(wire.NewScript("release", "GET, DEL", releaseLua), releaseWithoutLine)

	//go:embed scripts/join.lua
	joinLua    string
	joinScript = wire.NewScript("join", "LPOS, RPUSH, PEXPIRE", joinLua)

	//go:embed scripts/extend.lua
	extendLua    string
	extendScript = singleKey(wire.NewScript("extend", "GET, PEXPIRE, SET", extendLua), extendWithoutTombstone)

	//go:embed scripts/revoke.lua
	revokeLua    string
	revokeScript = wire.NewScript("revoke", "GET, PTTL, DEL, SET", revokeLua)

	//go:embed scripts/inspect.lua
	inspectLua    string
	inspectScript = wire.NewScript("inspect", "GET, PTTL", inspectLua)

	//go:embed scripts/check.lua
	checkLua    string
	checkScript = singleKey(wire.NewScript("check", "GET", checkLua), checkWithoutTombstone)

	//go:embed scripts/acquire_fenced.lua
	acquireFencedLua    string
	acquireFencedScript = wire.NewScript("fenced acquire", "GET, SET, INCR", acquireFencedLua)

	//go:embed scripts/fence.lua
	fenceLua    string
	fenceScript = wire.NewScript("fence", "GET, SET", fenceLua)

	//go:embed scripts/record.lua
	recordLua    string
	recordScript = wire.NewScript("token record", "GET, SET", recordLua)

	//go:embed scripts/resume.lua
	resumeLua    string
	resumeScript = wire.NewScript("resume", "GET, PTTL", resumeLua)

	// The multi-key forms (see multi.go).
	//go:embed scripts/acquire_multi.lua
	acquireMultiLua    string
	acquireMultiScript = wire.NewScript("multi-key acquire", "GET, SET, INCR", acquireMultiLua)

	//go:embed scripts/release_multi.lua
	releaseMultiLua    string
	releaseMultiScript = wire.NewScript("multi-key release", "GET, DEL", releaseMultiLua)

	//go:embed scripts/extend_multi.lua
	extendMultiLua    string
	extendMultiScript = singleKey(wire.NewScript("multi-key extend", "GET, PEXPIRE, SET", extendMultiLua), extendMultiWithoutTombstones)

	//go:embed scripts/check_multi.lua
	checkMultiLua    string
	checkMultiScript = singleKey(wire.NewScript("multi-key check", "GET", checkMultiLua), checkMultiWithoutTombstones)

	//go:embed scripts/fence_multi.lua
	fenceMultiLua    string
	fenceMultiScript = wire.NewScript("multi-key fence", "GET, SET", fenceMultiLua)
)

// extendMultiWithoutTombstones is the multi-key extend script's form
// without tombstones, for a Redis Cluster slot in migration (see
// extendWithoutTombstone): it never heals.
func extendMultiWithoutTombstones(c wire.Command) wire.Command {
	c.Keys = c.Keys[:c.OrderKeys]
	argv := slices.Clone(c.Argv) // value, milliseconds, heal, n
	argv[2] = "0"
	c.Argv = argv
	return c
}

// checkMultiWithoutTombstones is the multi-key check script's form without
// tombstones (see checkWithoutTombstone).
func checkMultiWithoutTombstones(c wire.Command) wire.Command {
	c.Keys = c.Keys[:c.OrderKeys]
	return c
}

// warmScripts are the scripts Warm loads: every one the coordinator sends.
var warmScripts = []*wire.Script{releaseScript, joinScript, extendScript, checkScript, acquireFencedScript, fenceScript, recordScript}

// singleKey gives s its single-key form (wire.Script.SingleKey).
func singleKey(s *wire.Script, form func(wire.Command) wire.Command) *wire.Script {
	s.SingleKey = form
	return s
}

// checkWithoutTombstone is the check script's single-key form, sent where
// a Redis Cluster refused the pair of the lease's key and its tombstone
// with TRYAGAIN (the slot migrates, and the node holds the key alone, or
// neither): the lease's key alone. A missing key then reads as missing,
// not as revoked.
func checkWithoutTombstone(c wire.Command) wire.Command {
	c.Keys = c.Keys[:1]
	return c
}

// releaseWithoutLine is the release script's single-key form (see
// checkWithoutTombstone): the lease's key alone, without its line of
// waiting Lockers, which a migrating slot may hold on the other node. The
// release still publishes (the channel is an argument), naming nobody's
// turn: every waiter may try, as when no Locker is in line.
func releaseWithoutLine(c wire.Command) wire.Command {
	c.Keys = c.Keys[:1]
	return c
}

// extendWithoutTombstone is the extend script's single-key form (see
// checkWithoutTombstone), which never heals: a missing key may have been
// revoked, and only the tombstone would say so. The extension heals again
// once the slot has settled.
func extendWithoutTombstone(c wire.Command) wire.Command {
	c.Keys = c.Keys[:1]
	argv := slices.Clone(c.Argv) // value, milliseconds, heal
	argv[2] = "0"
	c.Argv = argv
	return c
}
