-- Compare-and-pexpire: reset the expiry of KEYS[1] to ARGV[2] milliseconds
-- only while it holds this lease's value (ARGV[1]). Repeating it is harmless.
-- Returns 1 if extended, 0 if the key does not exist, -1 if another holder's
-- value is there. With ARGV[3] = "1" (healing, see Lease.Extend), a missing
-- key is set again with this lease's value and the TTL, and 2 returned: the
-- node forgot the lease (a restart, a failover) and holds it again; never
-- over another value. KEYS[2], where given, is the key's revocation
-- tombstone (Locker.Revoke): when it holds this lease's value, the key was
-- revoked and -2 is returned, never healed.

-- revoked reports whether tombstone holds this lease's value (ARGV[1])
-- among the values revoked, one a line (see revoke.lua).
local function revoked(tombstone)
	local t = redis.call("GET", tombstone)
	return t and string.find("\n" .. t .. "\n", "\n" .. ARGV[1] .. "\n", 1, true) ~= nil
end

local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2])
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
	if ARGV[3] == "1" then
		redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
		return 2
	end
	return 0
end
return -1
