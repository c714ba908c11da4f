-- An operator's forced release (Locker.Revoke): delete KEYS[1] whatever
-- value it holds, and leave a tombstone KEYS[2] holding the value deleted,
-- for as long as the key had left, so that its holder's next extension is
-- refused (the extend and check scripts answer -2) instead of healing the
-- key back. Returns {1, value, pttl} when a value was deleted (pttl -1: it
-- had no expiry, and the tombstone lives for ARGV[1] milliseconds), {0}
-- when the key did not exist.
local v = redis.call("GET", KEYS[1])
if v == false then
	return {0}
end
local ttl = redis.call("PTTL", KEYS[1])
redis.call("DEL", KEYS[1])
local keep = ttl
if keep <= 0 then
	keep = tonumber(ARGV[1])
end
if KEYS[2] then -- absent for a key that cannot carry a hash tag
	redis.call("SET", KEYS[2], v, "PX", keep)
end
return {1, v, ttl}
