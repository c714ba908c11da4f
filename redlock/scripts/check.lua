-- Reports whether KEYS[1] still holds this lease's value (ARGV[1]).
-- Returns 1 if it does, 0 if the key does not exist, -1 if another holder's
-- value is there, -2 if an operator revoked this very value (KEYS[2], where
-- given, is the key's revocation tombstone: see Locker.Revoke). Read-only.

-- revoked reports whether tombstone holds this lease's value (ARGV[1])
-- among the values revoked, one a line (see revoke.lua).
local function revoked(tombstone)
	local t = redis.call("GET", tombstone)
	return t and string.find("\n" .. t .. "\n", "\n" .. ARGV[1] .. "\n", 1, true) ~= nil
end

local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
	return 1
elseif v == false then
	-- A missing key on a replica (a demoted primary, reached on a
	-- connection opened before the failover) is the lagging copy's word,
	-- not the node's: answer as a write there is answered, READONLY, so
	-- that the client leaves the connection and asks the primary.
	local ok, r = pcall(redis.call, "INFO", "replication")
	if ok and type(r) == "string" and string.find(r, "role:slave", 1, true) then
		return redis.error_reply("READONLY You can't write against a read only replica.")
	end
	if KEYS[2] and revoked(KEYS[2]) then
		return -2
	end
	return 0
end
return -1
