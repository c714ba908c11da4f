-- Locker.TrustNodes: the memory of this server process is whole. Marks
-- KEYS[1] (the node's memory marker, see examine.lua) as begun at 0 for
-- this run_id and replication history, so that the node guard never
-- quarantines it in this run; a new process that loads it without AOF, a
-- flush that removes it, or a failover that the marker's history does not
-- cover, is caught again. A server that has no INFO (miniredis) is named
-- "?"; an ACL refusal of INFO is raised. ARGV[1] is the marker's new
-- absolute expiry (ms), as examine.lua gives it; ARGV[2] the trusting
-- Locker's MaxTTL (ms) and ARGV[3] its WaitReplicas, which start the
-- history's record of them.
--
-- ARGV[5], where not "", makes the trust conditional (Locker.TrustNewNodes,
-- which trusts what it checked a moment before): only a node whose marker
-- is still that value and whose process is still the one the marker names
-- (run_id, replication history, bytes read from a primary, evictions), so
-- that a restart, a flush, a failover or an eviction between the check and
-- the trust is not declared whole. (No marker is never a condition: after
-- a flush there is none again.) Returns 1 where it trusted, 0 where the
-- condition did not hold (nothing is written).
local function info(section)
	local r = redis.pcall("INFO", section)
	if type(r) == "table" and r.err then
		if string.find(r.err, "NOPERM", 1, true) or string.find(r.err, "can't run", 1, true) or string.find(r.err, "ACL failure", 1, true) then
			error(r)
		end
		return nil
	end
	return r
end
local id, replid, replicas, fed, evicted = "?", "?", 0, 0, 0
local server = info("server")
if server then
	id = string.match(server, "run_id:(%x+)") or "?"
end
local r = info("replication")
if r then
	replid = string.match(r, "master_replid:(%x+)") or "?"
	replicas = tonumber(string.match(r, "connected_slaves:(%d+)") or "0")
end
local stats = info("stats")
if stats then
	fed = tonumber(string.match(stats, "total_net_repl_input_bytes:(%d+)") or "0")
	evicted = tonumber(string.match(stats, "evicted_keys:(%d+)") or "0")
end
-- The longest MaxTTL a Locker declared (ARGV[2], and the marker's own) is
-- kept, at most ARGV[4] (MaxTTLLimit): see examine.lua.
local declared = tonumber(ARGV[2]) or 0
local m = redis.call("GET", KEYS[1])
local want = ARGV[5]
if want and want ~= "" then
	if m ~= want then
		return 0
	end
	local mrun, mreplid, mfed, mevicted = string.match(m, "^%d+ (%S+) %d+ (%S+) (%d+) %d+ %d+ (%d+)$")
	if mrun == nil or string.match(mrun, "^[^@]+") ~= id or mreplid ~= replid or tonumber(mfed) ~= fed or tonumber(mevicted) ~= evicted then
		return 0
	end
end
local d = m and tonumber(string.match(m, "^%d+ %S+ (%d+)") or "")
if d and d > declared then
	declared = math.min(d, tonumber(ARGV[4]))
end
redis.call("SET", KEYS[1], string.format("0 %s %d %s %d %d %d %d", id, declared, replid, fed, tonumber(ARGV[3]) or 0, replicas, evicted), "PXAT", ARGV[1])
return 1
