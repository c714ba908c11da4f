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
// without bound). The keys are weak pointers to the clients (dialKey) and
// each entry goes when its client is reclaimed (a cleanup added with the
// hook), so a program that makes a client and a Locker per request does
// not keep every client it ever made either.
var dialRecords sync.Map // weak.Pointer[byte] -> *dialRecord

// dialKey is the weak key of the client n points to: a *redis.Client,
// *redis.ClusterClient or *redis.Ring, or a program's own pointer type
// that wraps one, by the address it points to. ok is false for a Node held
// by value, or pointing to something of no size (which may share its
// address with other such values).
func dialKey(n Node) (key weak.Pointer[byte], p *byte, ok bool) {
	v := reflect.ValueOf(n)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Type().Elem().Size() == 0 {
		return key, nil, false
	}
	p = (*byte)(v.UnsafePointer())
	return weak.Make(p), p, true
}

// dialRecordOf returns n's record, adding the hook to n on first use; nil
// for a Node that takes no hooks. A Node with no weak key (see dialKey)
// gets a record and a hook per Locker, and lives as long as the program
// keeps it.
func dialRecordOf(n Node) *dialRecord {
	h, ok := n.(hooker)
	if !ok {
		return nil
	}
	key, p, ok := dialKey(n)
	if !ok {
		r := new(dialRecord)
		h.AddHook(r)
		return r
	}
	if r, ok := dialRecords.Load(key); ok {
		return r.(*dialRecord)
	}
	r, loaded := dialRecords.LoadOrStore(key, new(dialRecord))
	if !loaded {
		h.AddHook(r.(*dialRecord))
		runtime.AddCleanup(p, func(key weak.Pointer[byte]) { dialRecords.Delete(key) }, key)
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
