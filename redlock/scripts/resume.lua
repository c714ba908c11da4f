-- What one node holds of a handed-off lease (Locker.Resume), read-only:
-- KEYS[1..n] the lease's keys (n = ARGV[2]), ARGV[1] its value;
-- KEYS[n+1..2n], where given, the keys' fencing counters. Returns {1,
-- pttl, counter 1, ..., counter n} when every key holds the value (pttl
-- the least any key has left, in milliseconds; -1 if none has an expiry;
-- counters "0" where missing, none without counter keys), {0} when a key
-- is missing, {-1} when another value holds a key.
local n = tonumber(ARGV[2])
local least = -1
for i = 1, n do
	local v = redis.call("GET", KEYS[i])
	if v == false then
		-- A missing key on a replica is the lagging copy's word (check.lua).
		local ok, r = pcall(redis.call, "INFO", "replication")
		if ok and type(r) == "string" and string.find(r, "role:slave", 1, true) then
			return redis.error_reply("READONLY You can't write against a read only replica.")
		end
		return {0}
	elseif v ~= ARGV[1] then
		return {-1}
	end
	local ttl = redis.call("PTTL", KEYS[i])
	if ttl >= 0 and (least < 0 or ttl < least) then
		least = ttl
	end
end
local reply = {1, least}
for i = n + 1, #KEYS do
	reply[#reply + 1] = redis.call("GET", KEYS[i]) or "0"
end
return reply
