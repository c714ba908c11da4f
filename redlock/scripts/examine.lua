-- The node guard's examination (see guard.go): when did this node's memory
-- begin? KEYS[1] is the marker, "<began> <run> <maxttl>": when the memory
-- began (ms, the node's clock), the run_id of the server process that wrote
-- it, and the longest MaxTTL (ms) a Locker declared (absent in markers of
-- earlier versions). ARGV[2] is this Locker's MaxTTL (ms).
-- ARGV[1] is an absolute expiry (ms, a century or two ahead) for a marker
-- this script writes, or finds without one: every write of the marker moves
-- its expiry, so the expiry names the marker, and the client can read the
-- node's clock as the expiry minus the marker's PTTL (see guard.go).
-- Returns {marker, seconds, microseconds, expiry, pttl, seconds,
-- microseconds}: the marker as it now stands, the node's TIME at the
-- script's start, the marker's absolute expiry (PEXPIRETIME; -3 where the
-- client is to read TIME instead, see reply), its PTTL, and TIME at the
-- script's end. The client runs it only when
-- the steady-state companions say something changed: the marker is missing
-- or differs from the one it examined last, or this script is no longer
-- cached (a new server process, SCRIPT FLUSH).
--
-- A missing marker means the memory began when the process did (TIME minus
-- uptime), or now if the process ran FLUSHALL or FLUSHDB (which removed it)
-- or evicted keys (an eviction may have taken it, and lock keys with it),
-- or now when the server does not say its uptime. A marker written by
-- another process (its run_id differs) is kept, unless this process loaded
-- an RDB snapshot at its start without AOF and is not a promoted replica: a
-- snapshot may lack the latest grants, so then the memory began when the
-- process did. A marker that came by replication (a promoted replica) or by
-- a slot migration is kept: that is what WaitReplicas is for.

-- optional calls a command the server may lack (INFO sections on
-- miniredis, PEXPIRETIME before Redis 7.0) and returns nil in its stead; an
-- ACL refusal is raised, not mistaken for an unknown.
local function optional(...)
	local r = redis.pcall(...)
	if type(r) == "table" and r.err then
		if string.find(r.err, "NOPERM", 1, true) or string.find(r.err, "can't run", 1, true) or string.find(r.err, "ACL failure", 1, true) then
			error(r)
		end
		return nil
	end
	return r
end

local function info(section)
	return optional("INFO", section)
end

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call("GET", KEYS[1])
local began, run
-- declared is the longest MaxTTL (ms) any Locker declared on this node:
-- every Locker's quarantine lasts the longest, or a Locker with a shorter
-- one would let a node back while a longer lease it granted may be held.
local declared = tonumber(ARGV[2]) or 0
if m then
	local b, r, d = string.match(m, "^(%d+) (%S+) (%d+)$")
	if not b then
		b, r = string.match(m, "^(%d+) (%S+)$")
	end
	began, run = tonumber(b), r
	if d and tonumber(d) > declared then
		declared = tonumber(d)
	end
end
local id, start, uptime = "?", now, false
local server = info("server")
if server then
	id = string.match(server, "run_id:(%x+)") or "?"
	local up = tonumber(string.match(server, "uptime_in_seconds:(%d+)") or "")
	if up then
		-- uptime_in_seconds is whole seconds of the wall clock (the time
		-- now, truncated, less the start, truncated), so the process may
		-- have started up to a second after now less uptime: take the
		-- latest, which keeps a quarantine whole.
		start, uptime = now - up * 1000 + 1000, true
	end
end
-- reply gives the expiry and PTTL of the marker as it now stands. A server
-- that does not say its uptime (miniredis, whose TTLs follow its TIME only
-- with ClockTTL) is not read by its keys' expiry: -3, as for one without
-- PEXPIRETIME (before Redis 7.0).
local function reply(marker)
	local at = -3
	if uptime then
		at = optional("PEXPIRETIME", KEYS[1]) or -3
	end
	local pttl = redis.call("PTTL", KEYS[1])
	local t2 = redis.call("TIME") -- the script's end: PTTL was read before it
	return {marker, t[1], t[2], at, pttl, t2[1], t2[2]}
end
if began and run == id then
	-- The same process: its scripts went, not its memory. A longer MaxTTL
	-- than the marker says is written (a new expiry: every Locker looks
	-- again, and learns it).
	local now_marker = string.format("%d %s %d", began, id, declared)
	if now_marker ~= m then
		redis.call("SET", KEYS[1], now_marker, "PXAT", ARGV[1])
		return reply(now_marker)
	end
	if redis.call("PTTL", KEYS[1]) == -1 then
		redis.call("SET", KEYS[1], m, "PXAT", ARGV[1])
	end
	return reply(m)
end
if began then
	local p = info("persistence")
	local r = info("replication")
	local loaded = not (p and string.find(p, "rdb_last_load_keys_loaded:0", 1, true))
	local aof = p and string.find(p, "aof_enabled:1", 1, true)
	local promoted = r and string.find(r, "second_repl_offset:", 1, true) and not string.find(r, "second_repl_offset:-1", 1, true)
	if loaded and not aof and not promoted then
		began = math.max(began, start)
	end
else
	began = start
	local stats = info("commandstats")
	if not stats or string.find(stats, "cmdstat_flushall:", 1, true) or string.find(stats, "cmdstat_flushdb:", 1, true) then
		began = now
	end
	-- A process that evicted keys may have evicted the marker, and lock
	-- keys with it: its memory began now, whatever its uptime.
	local evictions = info("stats")
	if evictions and tonumber(string.match(evictions, "evicted_keys:(%d+)") or "0") > 0 then
		began = now
	end
end
m = string.format("%d %s %d", began, id, declared)
redis.call("SET", KEYS[1], m, "PXAT", ARGV[1])
return reply(m)
