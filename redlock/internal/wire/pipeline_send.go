package wire

import (
	"runtime"
	"time"
)

// A Pipeline's senders (see Pipeline): each takes from the queue the
// commands it may send together (take: none whose keys an earlier command
// still holds, so that commands on a key run in the order they were
// queued), sends them as one batch (exec, in pipeline_exec.go), and gives
// the keys back (unhold).

// send sends batches until no queued command is left for it.
func (p *Pipeline[R]) send(id int64) {
	var batch []job
	concurrent := false // the last batch carried more than one command
	ended := false      // take counted this sender out
	defer func() {
		if !ended {
			p.abandon(id, batch)
		}
	}()
	for {
		batch = p.take(id, batch[:0])
		if len(batch) == 0 {
			ended = true
			return
		}
		if concurrent && len(batch) < batchMax {
			// Let callers that are about to queue do so: under load one
			// yield deepens the batch. A lone caller skips it, so that its
			// command goes out at once.
			runtime.Gosched()
			batch = p.take(id, batch)
		}
		concurrent = len(batch) > 1
		p.exec(batch)
		p.unhold(id, batch)
		clear(batch) // drop the finished commands and rounds
	}
}

// abandon is the end of sender id that did not end in take: a hook ended
// its goroutine (runtime.Goexit) while batch was in flight, after exec
// answered every call of it (see exec). It lets go of the batch's keys,
// counts the sender out, and starts another for what is queued, so that
// nothing waits on a sender that is gone.
func (p *Pipeline[R]) abandon(id int64, batch []job) {
	p.unhold(id, batch)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.senders--
	if len(p.queue) > 0 && p.senders < maxSenders && !p.stalled() {
		p.startSender()
	}
}

// take moves to batch, in order and up to batchMax, the queued commands none
// of whose keys another sender holds, and holds their keys for sender id.
// When it takes nothing the sender ends: it returns nil and counts the
// sender out.
//
// A command left in the queue must keep every later one on its keys behind
// it. A command on one key is left when its key is held by another sender,
// or is in kept (below), and either leaves every later command on that key
// too; once the batch is full, everything after is left. But a multi-key
// command may be left for one of its keys while the others are free: so
// the keys of those left are gathered in kept, a set made only when one
// is, and a later command naming any of them is left too.
func (p *Pipeline[R]) take(id int64, batch []job) []job {
	p.mu.Lock()
	defer p.mu.Unlock()
	queue := p.queue[:0]
	var kept map[string]bool // the keys of multi-key commands left in the queue
	for _, j := range p.queue {
		if len(batch) == batchMax || p.heldElsewhere(id, &j) || j.names(kept) {
			queue = append(queue, j)
			if j.keys != nil && len(batch) < batchMax {
				kept = j.addTo(kept)
			}
			continue
		}
		if p.busy == nil {
			p.busy = make(map[string]int64)
		}
		if j.keys == nil {
			p.busy[j.key] = id
		} else {
			for _, k := range j.keys {
				p.busy[k] = id
			}
		}
		batch = append(batch, j)
	}
	clear(p.queue[len(queue):])
	p.queue = queue
	if len(batch) == 0 {
		p.senders--
		return nil
	}
	if p.sending == nil {
		p.sending = make(map[int64]time.Time)
	}
	p.sending[id] = time.Now()
	return batch
}

// unhold lets go of the keys sender id held for batch, and counts the
// batch's round trip (from when take stamped it) into p.rtt.
func (p *Pipeline[R]) unhold(id int64, batch []job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rtt += (time.Since(p.sending[id]) - p.rtt) / 8
	delete(p.sending, id)
	for i := range batch {
		if j := &batch[i]; j.keys == nil {
			p.unholdKey(id, j.key)
		} else {
			for _, k := range j.keys {
				p.unholdKey(id, k)
			}
		}
	}
}

// unholdKey lets go of key if sender id holds it. p.mu is held.
func (p *Pipeline[R]) unholdKey(id int64, key string) {
	if p.busy[key] == id {
		delete(p.busy, key)
	}
}

// heldElsewhere reports whether a sender other than id holds a key whose
// order j keeps. p.mu is held.
func (p *Pipeline[R]) heldElsewhere(id int64, j *job) bool {
	if j.keys == nil {
		owner, held := p.busy[j.key]
		return held && owner != id
	}
	for _, k := range j.keys {
		if owner, held := p.busy[k]; held && owner != id {
			return true
		}
	}
	return false
}

// names reports whether set holds a key whose order j keeps.
func (j *job) names(set map[string]bool) bool {
	if j.keys == nil {
		return set[j.key]
	}
	for _, k := range j.keys {
		if set[k] {
			return true
		}
	}
	return false
}

// addTo adds to set, made if nil, every key whose order j keeps, and
// returns it.
func (j *job) addTo(set map[string]bool) map[string]bool {
	if set == nil {
		set = make(map[string]bool, max(len(j.keys), 1))
	}
	if j.keys == nil {
		set[j.key] = true
	}
	for _, k := range j.keys {
		set[k] = true
	}
	return set
}
