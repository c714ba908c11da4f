// Package declaredkeys checks, for tests, that every key a Lua script
// touches is one it was given in KEYS, as servers that enforce declared
// keys require (Redis Cluster with flagged scripts, Dragonfly by default,
// ElastiCache Serverless): a script that builds a key name in Lua, or
// reads a key it was not passed, is refused there.
//
// Node wraps a node so that every script sent through it runs with
// Prelude first: a local redis table whose call and pcall know each
// command's key positions and fail on a key outside KEYS, or on a command
// the table does not know (so that a script using a new command is
// checked too, once its positions are added). Scripts sent by SHA-1 are
// found by their digest among the sources given to NewNode; the others
// (an examination with a nonce, say) arrive by EVAL with their source.
package declaredkeys

import (
	"context"
	"crypto/fips140"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Prelude shadows the global redis table for the script that follows it in
// the same chunk. A violation raises an error naming the command and the
// key; one raised inside pcall(redis.call, ...) is swallowed with the
// call, so scripts use that form only for commands without keys (INFO).
const Prelude = `local redis = (function(r)
	local declared = {}
	for _, k in ipairs(KEYS) do declared[k] = true end
	local first = {GET = 1, SET = 1, PEXPIRE = 1, PTTL = 1, PEXPIRETIME = 1, INCR = 1, INCRBY = 1,
		LPOS = 1, RPUSH = 1, LREM = 1, LPOP = 1, LRANGE = 1, LTRIM = 1, TTL = 1, EXPIRE = 1}
	local all = {DEL = true, EXISTS = true, UNLINK = true}
	local none = {INFO = true, TIME = true, PUBLISH = true, SPUBLISH = true, CLUSTER = true, CONFIG = true, PING = true}
	local function check(cmd, ...)
		local name = string.upper(tostring(cmd))
		local args = {...}
		if none[name] then return end
		local keys
		if all[name] then
			keys = args
		elseif name == "MSET" then
			keys = {}
			for i = 1, #args, 2 do keys[#keys + 1] = args[i] end
		elseif first[name] then
			keys = {args[first[name]]}
		else
			error("declared keys: " .. name .. " is not in the prelude's table of key positions")
		end
		for _, k in ipairs(keys) do
			if not declared[k] then
				error("declared keys: " .. name .. " touches " .. tostring(k) .. ", which is not in KEYS")
			end
		end
	end
	return setmetatable({
		call = function(...) check(...) return r.call(...) end,
		pcall = function(...) check(...) return r.pcall(...) end,
	}, {__index = r})
end)(redis)
`

// Node runs every script through Prelude and records which ran; every
// other call (Do, Subscribe...) is the client's. It is not a *redis.Client
// itself, so a Locker talks to it call by call (its direct transport),
// through the methods below.
type Node struct {
	*redis.Client
	bySHA map[string]string
	mu    sync.Mutex
	ran   map[string]int // by source: how many ran under the check
}

// NewNode wraps n; sources are the scripts it may be sent by SHA-1.
//
// It computes their digests as the server does, inside
// crypto/fips140.WithoutEnforcement: this stands in for the server's side
// (it maps a digest to its script), so that it works in a test run under
// GODEBUG=fips140=only, where the library's own side computes none.
func NewNode(n *redis.Client, sources []string) *Node {
	bySHA := make(map[string]string, len(sources))
	fips140.WithoutEnforcement(func() {
		for _, src := range sources {
			sum := sha1.Sum([]byte(src))
			bySHA[hex.EncodeToString(sum[:])] = src
		}
	})
	return &Node{Client: n, bySHA: bySHA, ran: map[string]int{}}
}

func (n *Node) checked(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	n.mu.Lock()
	n.ran[src]++
	n.mu.Unlock()
	return n.Client.Eval(ctx, Prelude+src, keys, args...)
}

// Eval runs script under the check.
func (n *Node) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return n.checked(ctx, script, keys, args...)
}

// EvalRO runs script under the check.
func (n *Node) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return n.checked(ctx, script, keys, args...)
}

// EvalSha runs the script of digest sha under the check, where it is one
// of the sources; an unknown digest answers NOSCRIPT, so that the caller
// sends its source by EVAL.
func (n *Node) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if src, ok := n.bySHA[strings.ToLower(sha)]; ok {
		return n.checked(ctx, src, keys, args...)
	}
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errNoScript)
	return cmd
}

// EvalShaRO is EvalSha.
func (n *Node) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return n.EvalSha(ctx, sha, keys, args...)
}

var errNoScript = redisError("NOSCRIPT No matching script. Please use EVAL.")

type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// Ran reports how many times each script ran under the check, by source.
func (n *Node) Ran() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]int, len(n.ran))
	for k, v := range n.ran {
		out[k] = v
	}
	return out
}
