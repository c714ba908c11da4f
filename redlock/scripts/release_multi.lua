-- Compare-and-delete over a multi-key lease: KEYS[1..n] are its keys,
-- ARGV[1] its value. Every key that holds the value is deleted; a key that
-- holds another value never is. With ARGV[2] = "notify" (a lease's
-- Unlock), each deleted key's release is published on its release channel
-- ARGV[2+i] (built in Go, in the key's slot; "" for none), as release.lua
-- does, naming no Locker's turn (a multi-key lease is not in any key's
-- line), so that Lock calls waiting for one of the keys elsewhere try at
-- once. Returns 1 if every key held the value, -1 if
-- another value holds any key, 0 otherwise (some or all keys had expired;
-- those that held the value are deleted all the same).
local held, missing, taken = 0, 0, false
for i = 1, #KEYS do
	local v = redis.call("GET", KEYS[i])
	if v == ARGV[1] then
		redis.call("DEL", KEYS[i])
		held = held + 1
		local channel = ARGV[2] == "notify" and ARGV[2 + i]
		if channel and channel ~= "" then
			local r = redis.pcall("SPUBLISH", channel, ARGV[1])
			if type(r) == "table" and r.err then
				redis.pcall("PUBLISH", channel, ARGV[1])
			end
		end
	elseif v then
		taken = true
	else
		missing = missing + 1
	end
end
if taken then
	return -1
elseif missing == 0 then
	return 1
end
if held == 0 then
	-- Nothing here at all: on a replica (a demoted primary, reached on a
	-- connection opened before the failover) that is the lagging copy's
	-- word, not the node's (see release.lua).
	local ok, r = pcall(redis.call, "INFO", "replication")
	if ok and type(r) == "string" and string.find(r, "role:slave", 1, true) then
		return redis.error_reply("READONLY You can't write against a read only replica.")
	end
end
return 0
