-- The token record of a fenced acquisition that did not wait for phase 2
-- (see fence.lua, which records it where phase 2 runs): KEYS[1..n] the
-- lease's keys, KEYS[n+1..2n] their token records, ARGV[1] the lease's
-- value, ARGV[1+i] key i's token. Each record is written as "token value"
-- only while its key holds the value: the record is sent without waiting
-- for it, and one that arrives after its lease ended must not overwrite
-- the next holder's. Returns how many records it wrote.
local n = #KEYS / 2
local written = 0
for i = 1, n do
	if redis.call("GET", KEYS[i]) == ARGV[1] then
		redis.call("SET", KEYS[n + i], ARGV[1 + i] .. " " .. ARGV[1])
		written = written + 1
	end
end
return written
