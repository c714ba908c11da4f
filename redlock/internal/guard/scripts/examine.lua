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
-- its WaitReplicas, ARGV[4] the longest MaxTTL any Locker may declare
-- (MaxTTLLimit, ms): a marker's larger value is kept as that, never as a
-- number string.format could not write.
-- ARGV[1] is an absolute expiry (ms, a century or two ahead) for a marker
-- this script writes, or finds without one: every write of the marker moves
-- its expiry, so the expiry names the marker, and the client can read the
-- node's clock as the expiry minus the marker's PTTL (see guard.go).
-- ARGV[5] is this script's own source, as the client sent it (a copy with
-- its nonce: see proof.go), so that the script names the digest the server
-- caches it by, in the run that examined: the client computes no SHA-1 (Go's
-- FIPS 140-3 mode forbids it).
-- Returns {marker, seconds, microseconds, expiry, pttl, seconds,
-- microseconds, found, evicts, digest}: the marker as it now stands, the
-- node's TIME at the script's start, the marker's absolute expiry
-- (PEXPIRETIME; -3 where the client is to read TIME instead, see reply), its
-- PTTL, TIME at the script's end, the marker as the script found it (false:
-- missing), 1 where the node may evict keys (maxmemory set, a policy other
-- than noeviction), so that the client watches its evictions, and the
-- SHA-1 of ARGV[5] (redis.sha1hex; false without ARGV[5]). The
-- client runs it only when the steady-state companions say something
-- changed: the marker is missing or differs from the one it examined last,
-- or this script is no longer cached (a new server process, SCRIPT FLUSH),
-- or the node's replication history or replicas changed.
--
-- A missing marker means the memory began now: a first use, a restart
-- without persistence, a flush (FLUSHALL, FLUSHDB, SWAPDB), an eviction
-- that took it, or a replica's stream without it, cannot be told apart
-- for sure (CONFIG RESETSTAT erases the counts that would tell them), so
-- a node is quarantined for MaxTTL from when the guard first finds it
-- without a marker (Locker.TrustNodes lifts it for a new deployment).
--
-- A marker found is judged by the history it was written in:
--   - Written by this process, which has read nothing from a primary nor
--     continued another history since: the same memory, whatever the history is called now (a master's
--     replid changes when its first replica arrives); unless the process
--     evicted keys since (an eviction policy that spares the marker, as
--     volatile-ttl does, may still take lock keys): then it began now.
--   - On a Redis Cluster, where the marker names the node ("<run_id>@<node
--     id>"; a node keeps its id across restarts), a slot marker from
--     another node that the cluster still counts as a live master: a
--     migration brought it with the slot's keys. Kept, as a history in
--     which no Locker waited for replicas (MIGRATE's writes are not waited
--     for). A slot marker from another node that is not a live master (this
--     node's failed former master, now perhaps its replica) is a
--     failover's, judged as below.
--   - Otherwise, if this process read a replication stream (it is, or was,
--     a replica) or continued another history (master_replid2: promoted,
--     or it loaded a replicated primary's files; CONFIG RESETSTAT hides
--     the first, never the second), its memory may be what a stream
--     brought; and a new process serving a history that had replicas
--     cannot be told from a promoted replica that restarted before anyone
--     examined it. Either keeps the marker only if every grant in the
--     marker's history reached every replica (each Locker waited for at
--     least as many replicas as the node ever had: wait >= replicas > 0)
--     and the process continued that history (a promoted replica: its
--     master_replid2 is the marker's replid) or read no stream (its own
--     files, judged by the disk rule too). Else its memory began now: it
--     may lack grants, exactly like a restart without persistence,
--     whatever its age.
--   - Otherwise (a process that loaded its memory from disk, of a history
--     without replicas): kept, unless the process loaded an RDB snapshot
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
	-- A began Lua cannot hold exactly (from 2^53 ms, some 285,000 years
	-- ahead) is unreadable, as a marker missing: string.format's %d would
	-- write one from 2^63 up as math.MinInt64, a memory whole since ever.
	if (#f == 2 or #f == 3 or #f == 8) and string.match(f[1], "^%d+$") and tonumber(f[1]) <= 9007199254740991 then
		began, run = tonumber(f[1]), f[2]
		local d = tonumber(f[3] or "")
		if d and d > declared then
			declared = math.min(d, tonumber(ARGV[4]))
		end
		if #f == 8 then
			mreplid, mfed, mwait, mreplicas, mevicted = f[4], tonumber(f[5]), tonumber(f[6]), tonumber(f[7]), tonumber(f[8])
		end
	end
end
-- On a Redis Cluster the marker names the node too, "<run_id>@<node id>":
-- a node keeps its id across restarts (nodes.conf), so a slot marker from
-- another node tells a migration (from a master that is still one) from a
-- failover (from this node's former master).
local mrun, mnode = run, nil
if run then
	local r, n = string.match(run, "^([^@]+)@(%x+)$")
	if r then
		mrun, mnode = r, n
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
	local digest = false -- a copy run by its digest (EVALSHA) is not sent its source
	if ARGV[5] then
		digest = redis.sha1hex(ARGV[5])
	end
	return {marker, t[1], t[2], at, pttl, t2[1], t2[2], found, evicts, digest}
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
local cluster = string.find(KEYS[1], "{", 1, true) ~= nil
local myid
if cluster then
	local ok, r = pcall(redis.call, "CLUSTER", "MYID")
	if ok and type(r) == "string" then
		myid = r
	end
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
	local self = id
	if myid then
		self = id .. "@" .. myid
	end
	local now_marker = string.format("%d %s %d %s %d %d %d %d", began, self, declared, replid, fed, wait, replicas, evicted)
	if now_marker ~= m then
		redis.call("SET", KEYS[1], now_marker, "PXAT", ARGV[1])
	elseif redis.call("PTTL", KEYS[1]) == -1 then
		redis.call("SET", KEYS[1], m, "PXAT", ARGV[1])
	end
	return reply(now_marker)
end
-- continued: this process continued another replication history than its
-- own (master_replid2 is set): it was promoted, or it loaded the files of
-- a primary that had replicas. With fed (bytes read from a primary: it is,
-- or was, a replica) it says the memory may be a stream's, not the
-- process's own; either alone suffices, since CONFIG RESETSTAT zeroes fed.
local continued = replid2 ~= "?" and replid2 ~= string.rep("0", 40)
local streamed = fed > 0 or continued
-- The disk rule: memory loaded from an RDB snapshot without AOF may lack
-- the latest grants, so it began no earlier than the process.
local function fromDisk()
	local p = info("persistence")
	local loaded = not (p and string.find(p, "rdb_last_load_keys_loaded:0", 1, true))
	local aof = p and string.find(p, "aof_enabled:1", 1, true)
	if loaded and not aof and began < start then
		began = start
		return true
	end
	return false
end
if began and mrun == id and (mfed == nil or mfed == fed) and not (continued and mreplid ~= nil and mreplid ~= replid) then
	-- The same process, which has been no replica since (it read no
	-- bytes from a primary, and continued no history since the marker):
	-- its scripts went, not its memory, unless it evicted keys since (or
	-- its statistics were reset, which hides whether it did).
	if mevicted and evicted ~= mevicted then
		began = now
	end
	return write(true)
end
-- liveMaster reports whether the cluster node named node is a master other
-- than this one that the cluster does not take for failed.
local function liveMaster(node)
	local ok, nodes = pcall(redis.call, "CLUSTER", "NODES")
	if not ok or type(nodes) ~= "string" then
		return false
	end
	for line in string.gmatch(nodes, "[^\n]+") do
		local nid, flags = string.match(line, "^(%x+) %S+ (%S+)")
		if nid == node then
			return string.find(flags, "master", 1, true) ~= nil and string.find(flags, "fail", 1, true) == nil and string.find(flags, "myself", 1, true) == nil
		end
	end
	return false
end
if began and myid and mnode and mnode ~= myid and liveMaster(mnode) then
	-- A slot marker from another master that still is one: a migration
	-- brought it with the slot's keys. No Locker waited to see them
	-- replicated.
	wait = 0
	if not streamed then
		fromDisk()
	end
	return write(false)
end
if began and (streamed or (mreplicas ~= nil and mreplicas > 0) or (myid and mnode ~= myid)) then
	-- Memory that may be a stream's (a promoted replica, or a cluster
	-- node's slot from its former master), or a new process serving a
	-- history that had replicas: it cannot be told from a promoted replica
	-- that restarted before anyone examined it. Kept only where every
	-- grant of the marker's history reached every replica, and this
	-- process continued that history (promoted from it) or read no stream
	-- (its own files); the disk rule on top.
	local followed = mreplid ~= nil and mreplid ~= "?" and mreplid == replid2
	if covered() and (followed or not streamed) then
		if fed == 0 then
			fromDisk()
		end
		return write(false)
	end
	began = now
	return write(false)
end
if began then
	if fromDisk() then
		-- The grants before are moot: the memory began with the process.
		return write(false)
	end
	-- The same memory, from AOF: its grants' replicas are as they were.
	return write(true)
end
-- A missing marker: a first use, a restart without persistence, a flush,
-- an eviction, or a replica's stream without it. Which, the node cannot
-- say for sure (CONFIG RESETSTAT erases the command and eviction counts
-- that would tell a flush or an eviction from a first use), so the memory
-- began now.
began = now
return write(false)
