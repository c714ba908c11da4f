package wire

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/quorum"
)

// The coordinator's reading of replies, as these tests need it: the
// transport's tests check what reaches the node and what comes back, and
// read it as the coordinator would (redlock's vote.go), without importing
// the coordinator.

// Outcome is a node's answer, as the coordinator reads it.
type Outcome int

const (
	Failed Outcome = iota
	Granted
	Missing
	Taken
)

// reader reads node i's reply.
type reader func(i int, cmd *redis.Cmd) (Outcome, error)

// pipeline is a pipeline without a rider.
type pipeline = Pipeline[struct{}]

// roundReceiver delivers each reply into a quorum round, read by read, with
// the WAIT's and the rider's verdicts taking back a grant, as the
// coordinator's ballot does.
type roundReceiver struct {
	round *quorum.Round[Outcome]
	read  reader
	calls *tracker
}

func (r *roundReceiver) Receive(i int, rep Reply) {
	o, err := r.read(i, rep.Cmd)
	if o == Granted && rep.NotReplicated != nil {
		o, err = Failed, rep.NotReplicated
	}
	if rep.Verdict != nil && err == nil && o == Granted {
		o, err = Failed, rep.Verdict
	}
	settle(r.round, r.calls, i, o, err)
}

func settle(round *quorum.Round[Outcome], calls *tracker, i int, o Outcome, err error) {
	round.Deliver(i, o, err)
	calls.done()
}

// tracker counts calls in flight, as the coordinator's Drain does.
type tracker struct{ wg sync.WaitGroup }

func (t *tracker) add(k int) { t.wg.Add(k) }
func (t *tracker) done()     { t.wg.Done() }

// wait returns once every call added was done, or with ctx's error. Call
// it only once every call was added (as the coordinator's Drain is
// called): a WaitGroup may not be added to while it is waited for.
func (t *tracker) wait(ctx context.Context) error {
	idle := make(chan struct{})
	go func() { t.wg.Wait(); close(idle) }()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The coordinator's scripts, read from where it embeds them.
var (
	releaseScript = loadScript("release", "GET, DEL")
	extendScript  = loadScript("extend", "GET, PEXPIRE, SET")
)

func loadScript(name, calls string) *Script {
	src, err := os.ReadFile("../../scripts/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return NewScript(name, calls, string(src))
}

// acquireCommand is the coordinator's acquisition: SET key value NX PX ms GET.
func acquireCommand(key, value string, ms int64) Command {
	return Command{Key: key, Args: []any{"SET", key, value, "NX", "PX", ms, "GET"}}.Of(value, RoleSets).Replicated().GuardedBy()
}

// readAcquire reads acquireCommand's reply as the coordinator does.
func readAcquire(value string) reader {
	return func(_ int, cmd *redis.Cmd) (Outcome, error) {
		old, err := cmd.Text()
		switch {
		case errors.Is(err, redis.Nil):
			return Granted, nil
		case err != nil:
			return Failed, err
		case old == value:
			return Granted, nil
		}
		return Taken, nil
	}
}

// readScript reads the lock scripts' replies as the coordinator does.
func readScript(_ int, cmd *redis.Cmd) (Outcome, error) {
	code, err := cmd.Int64()
	if err != nil {
		return Failed, err
	}
	switch code {
	case 1, 2:
		return Granted, nil
	case 0:
		return Missing, nil
	case -1:
		return Taken, nil
	}
	return Failed, fmt.Errorf("unexpected script reply %d", code)
}
