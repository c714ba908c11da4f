package main

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// An increment is one critical section seen whole: a read that returned
// Read, then a write of Read+1 that was accepted, refused, never sent, or
// of unknown outcome. Under a lock that excludes, or with fencing on every
// access, each accepted increment is atomic: the counter held Read at some
// instant inside the section and Read+1 right after it. porcupine searches
// for such instants, one per section, in an order that respects real time.
type incrementInput struct {
	Key  int
	Read int64
}

type incrementOutput struct {
	Applied bool // the write was accepted
	Unknown bool // the write failed without saying whether it applied
}

// counterModel is a counter per key (partitioned), stepped by increments.
// A section whose write was refused (or not sent) still read the counter:
// it must have held Read then. One of unknown outcome may have added one.
var counterModel = porcupine.NondeterministicModel{
	Partition: partitionByKey,
	Init:      func() []any { return []any{int64(0)} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(int64), input.(incrementInput), output.(incrementOutput)
		if s != in.Read {
			return nil
		}
		switch {
		case out.Unknown:
			return []any{s, s + 1}
		case out.Applied:
			return []any{s + 1}
		}
		return []any{s}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(incrementInput), output.(incrementOutput)
		switch {
		case out.Unknown:
			return fmt.Sprintf("read %d, wrote %d?", in.Read, in.Read+1)
		case out.Applied:
			return fmt.Sprintf("read %d, wrote %d", in.Read, in.Read+1)
		}
		return fmt.Sprintf("read %d, write refused", in.Read)
	},
	DescribeState: func(state any) string { return fmt.Sprint(state) },
}

func partitionByKey(ops []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[int][]porcupine.Operation{}
	var keys []int
	for _, op := range ops {
		k := op.Input.(incrementInput).Key
		if _, seen := byKey[k]; !seen {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

// increments turns the accesses into porcupine operations: one per
// critical section whose read was answered.
func increments(h *history) []porcupine.Operation {
	reads := map[int]access{}
	writes := map[int]access{}
	for _, a := range h.accesses {
		if a.Write {
			writes[a.Lease] = a
		} else {
			reads[a.Lease] = a
		}
	}
	var ops []porcupine.Operation
	for lease, r := range reads {
		if !r.Accepted {
			continue
		}
		op := porcupine.Operation{
			ClientId: h.leases[lease].Client,
			Input:    incrementInput{Key: h.leases[lease].Key, Read: r.Value},
			Call:     int64(r.Call),
			Return:   int64(r.Return),
			Output:   incrementOutput{},
		}
		if w, ok := writes[lease]; ok {
			op.Return = int64(w.Return)
			op.Output = incrementOutput{Applied: w.Accepted, Unknown: w.Unknown}
		}
		ops = append(ops, op)
	}
	return ops
}

// checkTimeout bounds porcupine's search; past it the verdict is Unknown.
const checkTimeout = time.Minute

// checkLinearizable runs porcupine on the run's increments. When it finds
// the history not linearizable it writes its visualisation to cfg.history.
func checkLinearizable(cfg config, h *history) (verdict, file string, err error) {
	model := counterModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, increments(h), checkTimeout)
	if res != porcupine.Illegal {
		return string(res), "", nil
	}
	if err := porcupine.VisualizePath(model, info, cfg.history); err != nil {
		return string(res), "", fmt.Errorf("porcupine's visualisation: %w", err)
	}
	return string(res), cfg.history, nil
}
