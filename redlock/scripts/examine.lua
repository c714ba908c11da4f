-- The node guard's examination (see guard.go): when did this node's memory
-- begin? KEYS[1] is the marker,
-- "<began> <run> <maxttl> <replid> <fed> <wait> <replicas> <evicted>": when
-- the memory began (ms, the node's clock), the run_id of the server process
-- that wrote it, the longest MaxTTL (ms) a Locker declared, the replication
-- history it was written in (the node's master_replid, the bytes its
-- process had read from a primary, total_net_repl_input_bytes, the fewest
-- replicas any Locker waits for, WaitReplicas, and the most replicas the
-- node had at an examination in that history), and the keys the process
-- had evicted (evicted_keys). Markers of earlier versions have only the
-- first two or three fields. ARGV[2] is this Locker's MaxTTL (ms), ARGV[3]
-- its WaitReplicas.
-- ARGV[1] is an absolute expiry (ms, a century or two ahead) for a marker
-- this script writes, or finds without one: every write of the marker moves
-- its expiry, so the expiry names the marker, and the client can read the
-- node's clock as the expiry minus the marker's PTTL (see guard.go).
-- Returns {marker, seconds, microseconds, expiry, pttl, seconds,
-- microseconds, found, evicts}: the marker as it now stands, the node's TIME
-- at the script's start, the marker's absolute expiry (PEXPIRETIME; -3 where
-- the client is to read TIME instead, see reply), its PTTL, TIME at the
-- script's end, the marker as the script found it (false: missing), and 1
-- where the node may evict keys (maxmemory set, a policy other than
-- noeviction), so that the client watches its evictions. The
-- client runs it only when the steady-state companions say something
-- changed: the marker is missing or differs from the one it examined last,
-- or this script is no longer cached (a new server process, SCRIPT FLUSH),
-- or the node's replication history or replicas changed.
--
-- A missing marker means the memory began when the process did (TIME minus
-- uptime), or now if the process ran FLUSHALL or FLUSHDB (which removed it)
-- or evicted keys (an eviction may have taken it, and lock keys with it),
-- or read a replication stream (a promoted replica whose history cannot be
-- traced), or now when the server does not say its uptime.
--
-- A marker found is judged by the history it was written in:
--   - Written by this process, which has read nothing from a primary since:
--     the same memory, whatever the history is called now (a master's
--     replid changes when its first replica arrives); unless the process
--     evicted keys since (an eviction policy that spares the marker, as
--     volatile-ttl does, may still take lock keys): then it began now.
--   - Otherwise, if this process read a replication stream (it is, or was,
--     a replica), its memory is what the stream brought. A promoted replica
--     of the marker's history (its master_replid2 is the marker's replid)
--     keeps the marker only if every grant in that history reached every
--     replica: each Locker waited for at least as many replicas as the node
--     ever had (wait >= replicas > 0). Else its memory began now: it may
--     lack grants, exactly like a restart without persistence, whatever its
--     age. A history the marker cannot be traced to (a primary that came
--     back as a replica and resynced, a chain of failovers unexamined)
--     begins now too; except on a Redis Cluster slot marker, which a slot
--     migration brings with the slot's keys: kept, as a history in which
--     no Locker waited for replicas (MIGRATE's writes are not waited for).
--   - Otherwise (a process that loaded its memory from disk, or received a
--     migrated slot): kept, unless the process loaded an RDB snapshot
--     without AOF, which may lack the latest grants: then the memory began
--     when the process did.

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
local found = m or false
local began, run, mreplid, mfed, mwait, mreplicas, mevicted
-- declared is the longest MaxTTL (ms) any Locker declared on this node:
-- every Locker's quarantine lasts the longest, or a Locker with a shorter
-- one would let a node back while a longer lease it granted may be held.
local declared = tonumber(ARGV[2]) or 0
local wait = tonumber(ARGV[3]) or 0
if m then
	local f = {}
	for w in string.gmatch(m, "%S+") do
		f[#f + 1] = w
	end
	if (#f == 2 or #f == 3 or #f == 8) and string.match(f[1], "^%d+$") then
		began, run = tonumber(f[1]), f[2]
		local d = tonumber(f[3] or "")
		if d and d > declared then
			declared = d
		end
		if #f == 8 then
			mreplid, mfed, mwait, mreplicas, mevicted = f[4], tonumber(f[5]), tonumber(f[6]), tonumber(f[7]), tonumber(f[8])
		end
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
local stats = info("stats")
local fed, evicted = 0, 0
if stats then
	fed = tonumber(string.match(stats, "total_net_repl_input_bytes:(%d+)") or "0")
	evicted = tonumber(string.match(stats, "evicted_keys:(%d+)") or "0")
end
local evicts = 0
local memory = info("memory")
if memory then
	local limit = tonumber(string.match(memory, "\nmaxmemory:(%d+)") or "0")
	local policy = string.match(memory, "maxmemory_policy:([%w-]+)") or "noeviction"
	if limit > 0 and policy ~= "noeviction" then
		evicts = 1
	end
end
local function reply(marker)
	local at = -3
	if uptime then
		at = optional("PEXPIRETIME", KEYS[1]) or -3
	end
	local pttl = redis.call("PTTL", KEYS[1])
	local t2 = redis.call("TIME") -- the script's end: PTTL was read before it
	return {marker, t[1], t[2], at, pttl, t2[1], t2[2], found, evicts}
end
-- The process's replication: its history (master_replid, and the one it
-- continued, master_replid2), its replicas, and the bytes it has read from
-- a primary. Unknown ("?") where the server does not say: then no failover
-- can be traced, and none is let in without a quarantine.
local replid, replid2, replicas = "?", "?", 0
local r = info("replication")
if r then
	replid = string.match(r, "master_replid:(%x+)") or "?"
	replid2 = string.match(r, "master_replid2:(%x+)") or "?"
	replicas = tonumber(string.match(r, "connected_slaves:(%d+)") or "0")
end
local function covered()
	return mwait and mreplicas and mwait > 0 and mwait >= mreplicas
end
-- write sets the marker; a history that continues keeps the fewest
-- replicas waited for and the most replicas seen in it.
local function write(continues)
	if continues and mwait then
		wait = math.min(wait, mwait)
		replicas = math.max(replicas, mreplicas)
	end
	local now_marker = string.format("%d %s %d %s %d %d %d %d", began, id, declared, replid, fed, wait, replicas, evicted)
	if now_marker ~= m then
		redis.call("SET", KEYS[1], now_marker, "PXAT", ARGV[1])
	elseif redis.call("PTTL", KEYS[1]) == -1 then
		redis.call("SET", KEYS[1], m, "PXAT", ARGV[1])
	end
	return reply(now_marker)
end
local cluster = string.find(KEYS[1], "{", 1, true) ~= nil
if began and run == id and (mfed == nil or mfed == fed) then
	-- The same process, which has been no replica since: its scripts
	-- went, not its memory, unless it evicted keys since.
	if mevicted and evicted > mevicted then
		began = now
	end
	return write(true)
end
if began and fed > 0 then
	local followed = mreplid ~= nil and mreplid ~= "?" and mreplid == replid2
	if followed and replid ~= "?" and covered() then
		-- A promoted replica of a history whose grants all reached it.
		return write(false)
	end
	if cluster and run ~= id and not followed then
		-- A slot marker from another master: a migration brought it, and
		-- the slot's keys, which no Locker waited to see replicated.
		wait = 0
		return write(false)
	end
	began = now
	return write(false)
end
if began then
	local p = info("persistence")
	local loaded = not (p and string.find(p, "rdb_last_load_keys_loaded:0", 1, true))
	local aof = p and string.find(p, "aof_enabled:1", 1, true)
	if loaded and not aof and began < start then
		-- Memory from a snapshot, which may lack the latest grants: the
		-- memory began when the process did, and the grants before are
		-- moot.
		began = start
		return write(false)
	end
	-- The same memory, from AOF (or a migrated slot, whose keys no Locker
	-- waited to see replicated): its grants' replicas are as they were.
	if cluster then
		wait = 0
	end
	return write(true)
end
began = start
-- A process that read a replication stream has the memory the stream
-- brought, not one that began with the process: without the marker its
-- history cannot be traced, and its memory began now.
if fed > 0 then
	began = now
end
local cmds = info("commandstats")
if not cmds or string.find(cmds, "cmdstat_flushall:", 1, true) or string.find(cmds, "cmdstat_flushdb:", 1, true) then
	began = now
end
-- A process that evicted keys may have evicted the marker, and lock keys
-- with it: its memory began now, whatever its uptime.
if evicted > 0 then
	began = now
end
return write(false)
