package redlock

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
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
// value, and an error reply as an error of go-redis's own reply type with
// the same text (go-redis gives a few, such as READONLY, types of their
// own; its Is... helpers recognize either). The readers see the same
// *redis.Cmd either way.
//
// What changes: go-redis does not see a server's error reply to these
// commands as an error, so it does not retry them on LOADING, TRYAGAIN and
// the like (network errors it retries as before): that node's vote fails
// at once, where go-redis would have waited its backoff (8 ms and up) within
// NodeTimeout, and Lock's own retries try again after RetryDelay.

// readsRaw reports whether c's reply is read raw: a plain command (not a
// script) that answers nil on success, which is an acquisition's SET.
func (c command) readsRaw() bool {
	return c.script == nil && c.role == roleSets
}

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
		return nil, serverError(string(line))
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
			return nil, serverError(string(data))
		}
		return string(data), nil
	}
	return nil, fmt.Errorf("redlock: unexpected reply %q to a command whose reply is a string", b)
}

var crlf = []byte("\r\n")

// redisErrorType is the type go-redis gives the server's error replies (the
// type of redis.Nil), whose package is internal to go-redis.
var redisErrorType = reflect.TypeOf(redis.Nil)

// serverError is a server's error reply msg as an error of go-redis's own
// reply type, so that redis.HasErrorPrefix, redis.IsReadOnlyError and the
// like see it as they would have.
func serverError(msg string) error {
	v := reflect.New(redisErrorType).Elem()
	v.SetString(msg)
	if err, ok := v.Interface().(error); ok {
		return err
	}
	return errors.New(msg) // not reached: redis.Nil is an error
}
