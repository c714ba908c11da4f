package redlock

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/drift"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// dialRecord keeps a client's latest failed dial, so that a node that did
// not reply before the deadline can say why where the reason is known: a
// connection refused, a name that does not resolve, a TLS handshake that
// failed. go-redis retries a failed dial with back-off inside the call, so
// without this the call is still dialling when the vote closes, and the
// cause is lost.
type dialRecord struct {
	last atomic.Pointer[dialFailure]
}

type dialFailure struct {
	at  time.Time
	err error
}

// DialHook records each failed dial; dials that succeed cost one branch.
func (r *dialRecord) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			r.last.Store(&dialFailure{at: time.Now(), err: err})
		}
		return conn, err
	}
}

func (r *dialRecord) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (r *dialRecord) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// hooker is a client that takes go-redis hooks: *redis.Client,
// *redis.ClusterClient (each shard's client), *redis.Ring, or a type that
// wraps one.
type hooker interface{ AddHook(redis.Hook) }

// dialRecords holds one record per client given to New, so that a client
// shared by many Lockers carries one hook, not one per Locker (go-redis
// never removes a hook: a program that makes a Locker per request over one
// client would grow the client's hook chain, and the cost of each dial,
// without bound). The keys are weak pointers and each entry goes when its
// client is reclaimed (a cleanup added with the hook), so a program that
// makes a client and a Locker per request does not keep every client it
// ever made either.
var dialRecords sync.Map // weak.Pointer[redis.Client | redis.ClusterClient | redis.Ring | byte] -> *dialRecord

// dialRecordOf returns n's record, adding the hook to n on first use; nil
// for a Node that takes no hooks. A go-redis client is keyed by itself; a
// program's own type that takes hooks (a wrapper of a client) by the
// address it points to, where it is a pointer to something (a wrapper held
// by value, or of no size, gets a hook per Locker, and lives as long as
// the program keeps it).
func dialRecordOf(n Node) *dialRecord {
	h, ok := n.(hooker)
	if !ok {
		return nil
	}
	switch c := n.(type) {
	case *redis.Client:
		return sharedDialRecord(c, h)
	case *redis.ClusterClient:
		return sharedDialRecord(c, h)
	case *redis.Ring:
		return sharedDialRecord(c, h)
	}
	if v := reflect.ValueOf(n); v.Kind() == reflect.Pointer && !v.IsNil() && v.Type().Elem().Size() > 0 {
		return sharedDialRecord((*byte)(v.UnsafePointer()), h)
	}
	r := new(dialRecord)
	h.AddHook(r)
	return r
}

// sharedDialRecord is the record of the client at p (h, as a hooker): the
// one its earlier Lockers share, or a new one, hooked once.
func sharedDialRecord[T any](p *T, h hooker) *dialRecord {
	key := weak.Make(p)
	if r, ok := dialRecords.Load(key); ok {
		return r.(*dialRecord)
	}
	r, loaded := dialRecords.LoadOrStore(key, new(dialRecord))
	if !loaded {
		h.AddHook(r.(*dialRecord))
		runtime.AddCleanup(p, func(key weak.Pointer[T]) { dialRecords.Delete(key) }, key)
	}
	return r.(*dialRecord)
}

// dialWindow is how long before a round's decision a dial that failed
// may have been the round's: twice NodeTimeout, and StallAfter more where
// the round waited on for every node late together (see stall.go).
func (l *Locker) dialWindow(late bool) time.Duration {
	window := drift.Mul(l.opts.NodeTimeout, 2)
	if late {
		return drift.Add(window, wire.StallAfter(l.opts.NodeTimeout))
	}
	return window
}

// withDialCause adds to err, the error of a node that did not reply before
// the round was decided, the dial that failed within the last window (twice
// NodeTimeout: a round is decided at most NodeTimeout after it began, and
// the scheduler may add to that; an older failure belongs to an earlier
// round and says nothing of this one), so that errors.Is
// matches both the missing reply and the dial's cause (for instance
// syscall.ECONNREFUSED). An older failure, or none, leaves err as it is.
func (r *dialRecord) withDialCause(err error, window time.Duration) error {
	if r == nil || err == nil {
		return err
	}
	f := r.last.Load()
	if f == nil {
		return err
	}
	ago := time.Since(f.at)
	if ago > window {
		return err
	}
	return fmt.Errorf("%w (a dial %v before: %w)", err, ago.Round(time.Microsecond), f.err)
}
