-- Reports whether KEYS[1] still holds this lease's value (ARGV[1]).
-- Returns 1 if it does, 0 if the key does not exist, -1 if another holder's
-- value is there. Read-only.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
	return 1
elseif v == false then
	return 0
end
return -1
