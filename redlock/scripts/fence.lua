-- Phase 2 of a fenced acquisition: KEYS[1..n] the lease's keys (one for
-- most leases), KEYS[n+1..2n] their fencing counters, KEYS[2n+1..3n] their
-- token records, ARGV[1] its value, ARGV[1+i] the token counter t for key
-- i and ARGV[1+n+i] key i's token. While every key still holds the value,
-- each counter lower than its t is raised to it, and each key's token is
-- recorded as "token value", for Locker.Inspect to show the holder's token
-- as Lease.Token reports it (the token names the node whose counter gave
-- t, which only the client's decision knows).
-- Returns 1 if the value is held on every key (whether or not a counter
-- moved), 0 if a key is missing, -1 if another value holds a key.
-- Counters are decimal strings of at most 19 digits; they are compared by
-- length, then lexically, never as Lua doubles.
local n = #KEYS / 3
for i = 1, n do
	local held = redis.call("GET", KEYS[i])
	if held == false then
		return 0
	elseif held ~= ARGV[1] then
		return -1
	end
end
for i = 1, n do
	local cur = redis.call("GET", KEYS[n + i]) or "0"
	local want = ARGV[1 + i]
	if #cur < #want or (#cur == #want and cur < want) then
		redis.call("SET", KEYS[n + i], want)
	end
	redis.call("SET", KEYS[2 * n + i], ARGV[1 + n + i] .. " " .. ARGV[1])
end
return 1
