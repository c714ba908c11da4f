-- Compare-and-delete over a lease's keys: KEYS[1..n] (one for most
-- leases), ARGV[1] its value. Every key that holds the value is deleted; a
-- key that holds another value never is.
--
-- With ARGV[2] = "notify" (a lease's Unlock, by the Locker whose id is
-- ARGV[3]), ARGV[3+i] is key i's release channel ("" for none), so n is
-- #ARGV - 3, and each deleted key's release is published to its waiters
-- there. A one-key lease's KEYS[2], where given, is the key's line of
-- waiting Lockers (join.lua), whose next Locker the release names. Without
-- "notify" (a failed attempt's release) n is #KEYS. Every name is built in
-- Go (hashtag.Beside: in the key's slot), so that every key the script
-- touches is declared; channels, which are not keys, are arguments.
--
-- Returns 1 if every key held the value (each deleted), 2 if so and
-- another Locker's turn was named, -1 if another value holds any key, 0
-- otherwise (some or all keys had expired; those that held the value are
-- deleted all the same).
local notify = ARGV[2] == "notify"
local n = #KEYS
if notify then
	n = #ARGV - 3
end
local held, missing, taken = 0, 0, false
local deleted = {}
for i = 1, n do
	local v = redis.call("GET", KEYS[i])
	if v == ARGV[1] then
		redis.call("DEL", KEYS[i])
		held, deleted[i] = held + 1, true
	elseif v then
		taken = true
	else
		missing = missing + 1
	end
end
if notify and held > 0 then
	-- Wake the keys' waiters (internal/notice): the released value on each
	-- deleted key's release channel. Sharded where the server has SPUBLISH
	-- (Redis 7+, Valkey), so a Redis Cluster node tells only the key's
	-- shard; PUBLISH otherwise. A notice is a hint (waiters still poll):
	-- pcall, so that an ACL that denies publishing never fails a release.
	--
	-- A one-key lease's line (KEYS[2]): the next Locker is popped and named
	-- after the value ("<value>\n<locker id>"), so that only its waiter
	-- tries, one attempt per hand-off, in the order the Lockers joined.
	-- This Locker's own place goes first: it held the key, so its place is
	-- taken. A lease of several keys is in no key's line and names no one.
	local message, named = ARGV[1], false
	if n == 1 and KEYS[2] and ARGV[3] ~= "" then
		redis.pcall("LREM", KEYS[2], 0, ARGV[3])
		local nxt = redis.pcall("LPOP", KEYS[2])
		if type(nxt) == "string" then
			message, named = ARGV[1] .. "\n" .. nxt, true
		end
	end
	for i = 1, n do
		local channel = ARGV[3 + i]
		if deleted[i] and channel ~= "" then
			local r = redis.pcall("SPUBLISH", channel, message)
			if type(r) == "table" and r.err then
				redis.pcall("PUBLISH", channel, message)
			end
		end
	end
	if named and not taken and missing == 0 then
		return 2
	end
end
if taken then
	return -1
elseif missing == 0 then
	return 1
end
if held == 0 then
	-- Nothing here at all: a missing key on a replica (a demoted primary,
	-- reached on a connection opened before the failover) is the lagging
	-- copy's word, not the node's: answer as a write there is answered,
	-- READONLY, so that the client leaves the connection and asks the
	-- primary.
	local ok, r = pcall(redis.call, "INFO", "replication")
	if ok and type(r) == "string" and string.find(r, "role:slave", 1, true) then
		return redis.error_reply("READONLY You can't write against a read only replica.")
	end
end
return 0
