-- An operator's forced release (Locker.Revoke): delete KEYS[1] whatever
-- value it holds, and leave a tombstone KEYS[2] holding the value deleted (and those
-- revoked before it while it lasts, one a line),
-- so that its holder's extensions are refused (the extend and check scripts
-- answer -2) instead of healing the key back. The tombstone lives ARGV[1]
-- milliseconds (past any extension the holder may still send: see
-- Locker.Revoke), or as long as the key had left, if longer. Returns {1,
-- value, pttl} when a value was deleted (pttl -1: it had no expiry), {0}
-- when the key did not exist.
local v = redis.call("GET", KEYS[1])
if v == false then
	return {0}
end
local ttl = redis.call("PTTL", KEYS[1])
redis.call("DEL", KEYS[1])
if KEYS[2] then -- absent for a key that cannot carry a hash tag
	-- The tombstone keeps every value revoked while it lasts, one a line
	-- (values this library makes have no newline): a later revocation of
	-- the next holder must not free the earlier one's extensions to heal.
	local life, list = math.max(ttl, tonumber(ARGV[1])), v
	local old = redis.call("GET", KEYS[2])
	if old then
		life = math.max(life, redis.call("PTTL", KEYS[2]))
		if string.find("\n" .. old .. "\n", "\n" .. v .. "\n", 1, true) then
			list = old
		else
			list = old .. "\n" .. v
		end
	end
	redis.call("SET", KEYS[2], list, "PX", life)
end
return {1, v, ttl}
