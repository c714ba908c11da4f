-- A scripted acquisition of one lease, all or nothing on this node: over
-- several keys (Locker.TryLockMulti), or fenced (one unfenced key is SET NX
-- PX GET, no script). KEYS[1..n] are the lock keys (n = ARGV[3]), ARGV[1]
-- the lease's value, ARGV[2] the TTL in milliseconds. Every key is set only
-- if each is free or already holds this value; if another value holds any
-- of them, nothing is written. A key that already holds this value is this
-- very call's, run before (the client library resent it, or the pipeline
-- ran it again after NOSCRIPT): it is left as it is, as SET NX GET leaves
-- it for one key.
--
-- With fencing (ARGV[4] = "fence"), KEYS[n+1..2n] are the keys' fencing
-- counters (each beside its key: same hash tag, no TTL). A key this call
-- sets has its counter incremented; a key that already held this value
-- does not: nothing else can have moved its counter while it held it
-- (phase 2 of other acquisitions only touches a counter while they hold
-- the key). Counters cross as decimal strings, never Lua doubles.
--
-- Returns 1, or {1, counter 1, ..., counter n} with fencing, when the lease
-- is set; -1, or {-1} with fencing, when another value holds a key.
local n = tonumber(ARGV[3])
local fence = ARGV[4] == "fence"
local mine = {}
for i = 1, n do
	local v = redis.call("GET", KEYS[i])
	if v == ARGV[1] then
		mine[i] = true
	elseif v then
		if fence then
			return {-1}
		end
		return -1
	end
end
local reply = {1}
for i = 1, n do
	if not mine[i] then
		redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
		if fence then
			redis.call("INCR", KEYS[n + i])
		end
	end
	if fence then
		reply[i + 1] = redis.call("GET", KEYS[n + i]) or "0"
	end
end
if fence then
	return reply
end
return 1
