-- Compare-and-pexpire: reset the expiry of KEYS[1] to ARGV[2] milliseconds
-- only while it holds this lease's value (ARGV[1]). Repeating it is harmless.
-- Returns 1 if extended, 0 if the key does not exist, -1 if another holder's
-- value is there.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2])
elseif v == false then
	return 0
end
return -1
