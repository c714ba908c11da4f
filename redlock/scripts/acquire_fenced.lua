-- Phase 1 of a fenced acquisition, in one round trip: SET KEYS[1] ARGV[1]
-- NX PX ARGV[2], and only if that set it, INCR the key's fencing counter
-- KEYS[2] (same hash tag, no TTL). Returns {1, counter} when granted, {0, ""}
-- when another value holds the key. A retry of this very call (the client
-- library resent it after a lost reply) finds ARGV[1] already there and
-- returns the counter as it stands, without a second INCR: nothing else can
-- have moved it while the key held this value (phase 2 of other acquisitions
-- only touches it while they hold the key). The counter crosses as a string,
-- so no value passes through a Lua double.
local held = redis.call("GET", KEYS[1])
if held == false then
	redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
	redis.call("INCR", KEYS[2])
	return {1, redis.call("GET", KEYS[2])} -- the exact decimal, not a Lua double
elseif held == ARGV[1] then
	return {1, redis.call("GET", KEYS[2]) or "0"}
end
return {0, ""}
