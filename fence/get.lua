-- Reads KEYS[1] for the holder of fencing token ARGV[1]: refused if a higher
-- token was accepted for KEYS[1] (kept at KEYS[2]); otherwise the record is
-- raised to ARGV[1], so that no older holder can write after this read, and
-- the value is returned. The value is read first, so that a read that fails
-- (a key of another type) leaves the record as it was. Tokens are 20-digit
-- zero-padded decimals (see set.lua). Returns {0} if stale, {1} if the key
-- is missing, {1, value}.
local last = redis.call("GET", KEYS[2])
if last and last > ARGV[1] then
	return {0}
end
local v = redis.call("GET", KEYS[1])
if last ~= ARGV[1] then
	redis.call("SET", KEYS[2], ARGV[1])
end
if v then
	return {1, v}
end
return {1}
