-- Compare-and-pexpire over a lease's keys: KEYS[1..n] (n = ARGV[4]; one
-- for most leases), ARGV[1] its value, ARGV[2] the TTL in milliseconds.
-- With ARGV[3] = "1" (healing, see Lease.Extend), a missing key is set
-- again with this lease's value and the TTL: the node forgot the lease (a
-- restart, a failover) and holds it again; never over another value.
-- KEYS[n+1..2n], where given, are the keys' revocation tombstones
-- (Locker.Revoke): a missing key whose tombstone holds this lease's value
-- was revoked, and is never healed. All or nothing: the keys are read
-- first, and only if none holds another value, none was revoked, and
-- (without healing) none is missing, every key is extended, and a missing
-- one set again. Returns 1 if extended, 2 if extended and some key was set
-- again (healed), 0 if a key is missing (not healing), -1 if another value
-- holds a key, -2 if an operator revoked a key of this very lease.
-- Repeating it is harmless.

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

local n = tonumber(ARGV[4])
local tombstones = #KEYS >= 2 * n
local missing = {}
for i = 1, n do
	local v = redis.call("GET", KEYS[i])
	if v == false then
		if #missing == 0 and onReplica() then
			return redis.error_reply(readonly)
		end
		if tombstones and revoked(KEYS[n + i]) then
			return -2
		end
		missing[#missing + 1] = i
	elseif v ~= ARGV[1] then
		return -1
	end
end
if #missing > 0 and ARGV[3] ~= "1" then
	return 0
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
