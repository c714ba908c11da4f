-- Compare-and-delete: delete KEYS[1] only while it holds this lease's value
-- (ARGV[1]), and, with ARGV[2] = "notify" (a lease's Unlock, by the Locker
-- whose id is ARGV[3]), publish the release to the key's waiters on the
-- key's release channel ARGV[4], naming the Locker whose turn is next in
-- the key's line KEYS[2]. Both names are built in Go (hashtag.Beside: in
-- the key's slot), so that every key the script touches is declared.
-- Returns 1 if deleted, 2 if deleted and another Locker's turn was named,
-- 0 if the key does not exist, -1 if another holder's value is there
-- (which must never be deleted).
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
	local deleted = redis.call("DEL", KEYS[1])
	if ARGV[2] ~= "notify" then
		return deleted
	end
	-- Wake the key's waiters (internal/notice): the released value on the
	-- key's release channel. Sharded where the server has SPUBLISH (Redis
	-- 7+, Valkey), so a Redis Cluster node tells only the key's shard;
	-- PUBLISH otherwise. A notice is a hint (waiters still poll): pcall,
	-- so that an ACL that denies publishing never fails a release.
	--
	-- The line of Lockers waiting for the key (join.lua) is KEYS[2]: the
	-- next one is popped and named after the value ("<value>\n<locker
	-- id>"), so that only its waiter tries, one attempt per hand-off, in the
	-- order the Lockers joined. This Locker's own place goes first: it held
	-- the key, so its place is taken.
	local message, named = ARGV[1], false
	if KEYS[2] and ARGV[3] and ARGV[3] ~= "" then
		redis.pcall("LREM", KEYS[2], 0, ARGV[3])
		local nxt = redis.pcall("LPOP", KEYS[2])
		if type(nxt) == "string" then
			message, named = ARGV[1] .. "\n" .. nxt, true
		end
	end
	local channel = ARGV[4]
	local r = redis.pcall("SPUBLISH", channel, message)
	if type(r) == "table" and r.err then
		redis.pcall("PUBLISH", channel, message)
	end
	if named then
		return 2
	end
	return deleted
elseif v == false then
	-- A missing key on a replica (a demoted primary, reached on a
	-- connection opened before the failover) is the lagging copy's word,
	-- not the node's: answer as a write there is answered, READONLY, so
	-- that the client leaves the connection and asks the primary.
	local ok, r = pcall(redis.call, "INFO", "replication")
	if ok and type(r) == "string" and string.find(r, "role:slave", 1, true) then
		return redis.error_reply("READONLY You can't write against a read only replica.")
	end
	return 0
end
return -1
