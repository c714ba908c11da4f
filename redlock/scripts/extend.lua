-- Compare-and-pexpire: reset the expiry of KEYS[1] to ARGV[2] milliseconds
-- only while it holds this lease's value (ARGV[1]). Repeating it is harmless.
-- Returns 1 if extended, 0 if the key does not exist, -1 if another holder's
-- value is there. With ARGV[3] = "1" (healing, see Lease.Extend), a missing
-- key is set again with this lease's value and the TTL, and 2 returned: the
-- node forgot the lease (a restart, a failover) and holds it again; never
-- over another value.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2])
elseif v == false then
	if ARGV[3] == "1" then
		redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
		return 2
	end
	return 0
end
return -1
