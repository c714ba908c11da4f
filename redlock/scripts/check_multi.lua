-- Reports whether every key of a multi-key lease (KEYS[1..n], n = ARGV[2])
-- still holds its value (ARGV[1]); KEYS[n+1..2n], where given, are the
-- keys' revocation tombstones. Returns 1 if every key holds it, -1 if
-- another value holds a key, -2 if an operator revoked a key of this very
-- lease, 0 if a key is missing. Read-only.

-- revoked reports whether tombstone holds this lease's value (ARGV[1])
-- among the values revoked, one a line (see revoke.lua).
local function revoked(tombstone)
	local t = redis.call("GET", tombstone)
	return t and string.find("\n" .. t .. "\n", "\n" .. ARGV[1] .. "\n", 1, true) ~= nil
end

local n = tonumber(ARGV[2])
local tombstones = #KEYS >= 2 * n
local missing = false
for i = 1, n do
	local v = redis.call("GET", KEYS[i])
	if v == false then
		if tombstones and revoked(KEYS[n + i]) then
			return -2
		end
		missing = true
	elseif v ~= ARGV[1] then
		return -1
	end
end
if missing then
	-- A missing key on a replica is the lagging copy's word (check.lua).
	local ok, r = pcall(redis.call, "INFO", "replication")
	if ok and type(r) == "string" and string.find(r, "role:slave", 1, true) then
		return redis.error_reply("READONLY You can't write against a read only replica.")
	end
	return 0
end
return 1
