-- Compare-and-pexpire over a multi-key lease: KEYS[1..n] are its keys (n =
-- ARGV[4]), ARGV[1] its value, ARGV[2] the TTL in milliseconds, ARGV[3] =
-- "1" to heal (see extend.lua); KEYS[n+1..2n], where given, the keys'
-- revocation tombstones (Locker.Revoke). All or nothing: the keys are
-- read first, and only if none holds another value, none was revoked, and
-- (without healing) none is missing, every key is extended, and a missing
-- one set again with this value. Returns 1 if extended, 2 if extended and
-- some key was set again (healed), 0 if a key is missing (not healing),
-- -1 if another value holds a key, -2 if an operator revoked a key of this
-- very lease.

-- revoked reports whether tombstone holds this lease's value (ARGV[1])
-- among the values revoked, one a line (see revoke.lua).
local function revoked(tombstone)
	local t = redis.call("GET", tombstone)
	return t and string.find("\n" .. t .. "\n", "\n" .. ARGV[1] .. "\n", 1, true) ~= nil
end

local n = tonumber(ARGV[4])
local tombstones = #KEYS >= 2 * n
local missing = {}
for i = 1, n do
	local v = redis.call("GET", KEYS[i])
	if v == false then
		if tombstones and revoked(KEYS[n + i]) then
			return -2
		end
		missing[#missing + 1] = i
	elseif v ~= ARGV[1] then
		return -1
	end
end
if #missing > 0 then
	-- A missing key on a replica is the lagging copy's word (extend.lua).
	local ok, r = pcall(redis.call, "INFO", "replication")
	if ok and type(r) == "string" and string.find(r, "role:slave", 1, true) then
		return redis.error_reply("READONLY You can't write against a read only replica.")
	end
	if ARGV[3] ~= "1" then
		return 0
	end
end
local healed = {}
for _, i in ipairs(missing) do
	healed[i] = true
	redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
end
for i = 1, n do
	if not healed[i] then
		redis.call("PEXPIRE", KEYS[i], ARGV[2])
	end
end
if #missing > 0 then
	return 2
end
return 1
