package wire

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// An acquisition's SET answers nil when it sets the key: the grant, the
// common case. go-redis turns a nil reply into the error redis.Nil, and
// then asks of that error, as of any error, whether the command or the
// pipeline should be retried and whether the connection is still good:
// a dozen errors.As walks, each with an allocation (about 14 per command,
// measured with a memory profile of BenchmarkCycle). On a lone client that
// was most of what the node guard's pipeline cost over a plain command.
//
// So the auto-pipeline sends such commands as a redis.RawCmd, whose reply
// go-redis reads as bytes and never takes for an error, and sets the reply
// on the job's *redis.Cmd itself (setRaw): nil as redis.Nil, a value as the
// value. The readers see the same *redis.Cmd either way.
//
// An error reply is not read raw: the pipeline sends the command again as
// a plain command (see Pipeline.exec, where NOSCRIPT reruns go too), so that
// go-redis reads the error and does with it all it does for its own
// commands: its error types (READONLY, LOADING, OOM, NOPERM have their own),
// its retries and backoff, and retiring a connection that answered
// READONLY (a demoted primary behind a DNS name or a proxy that moved on).
// Error replies are rare, so the second round trip costs little; the
// first one wrote nothing (an error reply to SET sets no key).

// setRaw sets on cmd the reply that raw, the same command, got.
func setRaw(cmd *redis.Cmd, raw *redis.RawCmd) {
	b, err := raw.Result()
	if err != nil {
		cmd.SetErr(err)
		return
	}
	val, err := parseScalar(b)
	if err != nil {
		cmd.SetErr(err)
		return
	}
	cmd.SetVal(val)
}

// parseScalar reads one scalar RESP2 or RESP3 reply, as ReadRawReply
// returns it (with its CRLFs): nil gives redis.Nil, an error reply the
// error, a string or a status its text, an integer an int64. Aggregates
// (arrays, maps, sets) are not expected here and give an error.
func parseScalar(b []byte) (any, error) {
	if len(b) < 3 || string(b[len(b)-2:]) != "\r\n" {
		return nil, fmt.Errorf("redlock: malformed reply %q", b)
	}
	line := b[1 : len(b)-2] // for a bulk reply, its length, CRLF, the data
	switch b[0] {
	case '_': // RESP3 null
		return nil, redis.Nil
	case '+':
		return string(line), nil
	case '-':
		return nil, &errorReply{msg: string(line)}
	case ':':
		n, err := strconv.ParseInt(string(line), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redlock: malformed integer reply %q", b)
		}
		return n, nil
	case '$', '!': // a bulk string; a RESP3 bulk error
		head, data, ok := bytes.Cut(line, crlf)
		n, err := strconv.Atoi(string(head))
		switch {
		case err != nil:
			return nil, fmt.Errorf("redlock: malformed bulk reply %q", b)
		case n < 0 && !ok: // RESP2 null bulk string
			return nil, redis.Nil
		case !ok || n != len(data):
			return nil, fmt.Errorf("redlock: malformed bulk reply %q", b)
		case b[0] == '!':
			return nil, &errorReply{msg: string(data)}
		}
		return string(data), nil
	}
	return nil, fmt.Errorf("redlock: unexpected reply %q to a command whose reply is a string", b)
}

var crlf = []byte("\r\n")

// errorReply is a server's error reply read raw, which the pipeline sends
// again as a plain command for go-redis to read (see above).
type errorReply struct{ msg string }

func (e *errorReply) Error() string { return e.msg }

// readAgain reports whether err is an error reply read raw (setRaw sets it
// unwrapped; a type assertion allocates nothing on the hot path).
func readAgain(err error) bool {
	_, ok := err.(*errorReply)
	return ok
}
