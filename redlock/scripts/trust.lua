-- Locker.TrustNodes: the memory of this server process is whole. Marks
-- KEYS[1] (the node's memory marker, see guard.lua) as begun at 0 for this
-- run_id, so that the guard never refuses in this run; a new process that
-- loads it without AOF, or a flush that removes it, is caught again.
local id = "?"
local info = redis.pcall("INFO", "server")
if type(info) == "string" then
	id = string.match(info, "run_id:(%x+)") or "?"
end
redis.call("SET", KEYS[1], "0 " .. id)
return 1
