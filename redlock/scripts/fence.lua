-- Phase 2 of a fenced acquisition: while KEYS[1] still holds this lease's
-- value (ARGV[1]), raise the fencing counter KEYS[2] to ARGV[2] if it is
-- lower, and record the lease's token ARGV[3] beside it in KEYS[3], as
-- "token value", for Locker.Inspect to show the holder's token as
-- Lease.Token reports it (the token names the node whose counter gave t,
-- which only the client's decision knows). Returns 1 if the value is held
-- (whether or not the counter moved), 0 if the key is missing, -1 if
-- another value holds it.
-- Counters are decimal strings of at most 19 digits; they are compared by
-- length, then lexically, never as Lua doubles.
local held = redis.call("GET", KEYS[1])
if held == false then
	return 0
elseif held ~= ARGV[1] then
	return -1
end
local cur = redis.call("GET", KEYS[2]) or "0"
local want = ARGV[2]
if #cur < #want or (#cur == #want and cur < want) then
	redis.call("SET", KEYS[2], want)
end
redis.call("SET", KEYS[3], ARGV[3] .. " " .. ARGV[1])
return 1
