-- Compare-and-delete: delete KEYS[1] only while it holds this lease's value.
-- Returns 1 if deleted, 0 if the key does not exist, -1 if another holder's
-- value is there (which must never be deleted).
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
	return redis.call("DEL", KEYS[1])
elseif v == false then
	return 0
end
return -1
