-- Writes ARGV[1] to KEYS[1] only if the fencing token ARGV[2] is at least
-- the highest token accepted for KEYS[1] so far (kept at KEYS[2]), and then
-- records it. Tokens arrive as 20-digit zero-padded decimals, so comparing
-- the strings compares the numbers exactly (Lua numbers are doubles).
-- Returns 1 if written, 0 if the token is stale.
local last = redis.call("GET", KEYS[2])
if last and last > ARGV[2] then
	return 0
end
redis.call("SET", KEYS[1], ARGV[1])
redis.call("SET", KEYS[2], ARGV[2])
return 1
