-- What one node holds for a lock (Locker.Inspect), read-only: KEYS[1] the
-- lock's key, KEYS[2] its fencing counter, KEYS[3] its revocation
-- tombstone, KEYS[4] its token record ("token value", see fence.lua).
-- Returns {value or false, pttl, counter or false, revoked value or false,
-- token record or false}; pttl is -2 when the key does not exist, -1 when
-- it has no expiry. A key that cannot carry a hash tag (see
-- Locker.Inspect) comes alone, and the others read as false.
local function get(k)
	if k then
		return redis.call("GET", k)
	end
	return false
end
return {get(KEYS[1]), redis.call("PTTL", KEYS[1]), get(KEYS[2]), get(KEYS[3]), get(KEYS[4])}
