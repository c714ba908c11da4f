-- Join the line of Lockers waiting for a lock: KEYS[1] is the key's line
-- ({KEY}:redlock-waiters, in the key's slot), ARGV[1] the waiting
-- Locker's id, ARGV[2] how long the line lasts unless joined again (ms).
-- A Locker already in the line keeps its place. The release script pops
-- the next Locker and names it in its notice (see release.lua).
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
	redis.call("RPUSH", KEYS[1], ARGV[1])
end
redis.call("PEXPIRE", KEYS[1], ARGV[2])
return 1
