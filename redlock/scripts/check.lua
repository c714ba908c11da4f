-- Reports whether every key of a lease (KEYS[1..n], n = ARGV[2]; one for
-- most leases) still holds its value (ARGV[1]); KEYS[n+1..2n], where
-- given, are the keys' revocation tombstones (Locker.Revoke). Returns 1 if
-- every key holds it, -1 if another value holds a key, -2 if an operator
-- revoked a key of this very lease, 0 if a key is missing. Read-only.

-- revoked reports whether tombstone holds this lease's value (ARGV[1])
-- among the values revoked, one a line (see revoke.lua).
local function revoked(tombstone)
	local t = redis.call("GET", tombstone)
	return t and string.find("\n" .. t .. "\n", "\n" .. ARGV[1] .. "\n", 1, true) ~= nil
end

-- onReplica reports whether this node is a replica: a missing key there (a
-- demoted primary, reached on a connection opened before the failover) is
-- the lagging copy's word, not the node's, and so is its tombstone. Asked
-- before either is believed, so that the script answers as a write there
-- is answered, READONLY, and the client leaves the connection and asks the
-- primary.
local function onReplica()
	local ok, r = pcall(redis.call, "INFO", "replication")
	return ok and type(r) == "string" and string.find(r, "role:slave", 1, true) ~= nil
end
local readonly = "READONLY You can't write against a read only replica."

local n = tonumber(ARGV[2])
local tombstones = #KEYS >= 2 * n
local missing = false
for i = 1, n do
	local v = redis.call("GET", KEYS[i])
	if v == false then
		if not missing and onReplica() then
			return redis.error_reply(readonly)
		end
		if tombstones and revoked(KEYS[n + i]) then
			return -2
		end
		missing = true
	elseif v ~= ARGV[1] then
		return -1
	end
end
if missing then
	return 0
end
return 1
