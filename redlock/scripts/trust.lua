-- Locker.TrustNodes: the memory of this server process is whole. Marks
-- KEYS[1] (the node's memory marker, see examine.lua) as begun at 0 for
-- this run_id, so that the node guard never quarantines it in this run; a
-- new process that loads it without AOF, or a flush that removes it, is
-- caught again. A server that has no INFO (miniredis) is named "?"; an ACL
-- refusal of INFO is raised. ARGV[1] is the marker's new absolute expiry
-- (ms), as examine.lua gives it.
local id = "?"
local info = redis.pcall("INFO", "server")
if type(info) == "table" and info.err then
	if string.find(info.err, "NOPERM", 1, true) or string.find(info.err, "can't run", 1, true) or string.find(info.err, "ACL failure", 1, true) then
		error(info)
	end
elseif type(info) == "string" then
	id = string.match(info, "run_id:(%x+)") or "?"
end
-- The longest MaxTTL a Locker declared (ARGV[2], and the marker's own) is
-- kept: see examine.lua.
local declared = tonumber(ARGV[2]) or 0
local m = redis.call("GET", KEYS[1])
local d = m and tonumber(string.match(m, "^%d+ %S+ (%d+)$") or "")
if d and d > declared then
	declared = d
end
redis.call("SET", KEYS[1], string.format("0 %s %d", id, declared), "PXAT", ARGV[1])
return 1
