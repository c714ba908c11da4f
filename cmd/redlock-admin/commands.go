package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/redlock/redlock/redlock"
)

// printer writes a command's result as a table or, with -json, as one JSON
// document.
type printer struct {
	w    io.Writer
	json bool
}

func (p printer) emit(v any, table func(*tabwriter.Writer)) {
	if p.json {
		enc := json.NewEncoder(p.w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
		return
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	table(tw)
	tw.Flush()
}

// ms is a duration in milliseconds, for JSON.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ttlText is a remaining TTL for the table.
func ttlText(held bool, ttl time.Duration) string {
	switch {
	case !held:
		return "-"
	case ttl < 0:
		return "no expiry"
	}
	return ttl.Round(time.Millisecond).String()
}

func quarantineText(left time.Duration) string {
	if left <= 0 {
		return "-"
	}
	return left.Round(time.Second).String()
}

// nodeHealth is one node's health, for JSON.
type nodeHealth struct {
	Node             int     `json:"node"`
	Name             string  `json:"name"`
	Role             string  `json:"role,omitempty"`
	Version          string  `json:"version,omitempty"`
	Replicas         int     `json:"replicas"`
	RTTms            float64 `json:"rtt_ms"`
	QuarantineLeftMs float64 `json:"quarantine_left_ms"`
	QuarantineCause  string  `json:"quarantine_cause,omitempty"`
	Durable          bool    `json:"durable"`
	AppendOnly       string  `json:"appendonly,omitempty"`
	AppendFsync      string  `json:"appendfsync,omitempty"`
	MaxmemoryPolicy  string  `json:"maxmemory_policy,omitempty"`
	Evicts           bool    `json:"evicts"`
	Error            string  `json:"error,omitempty"`
}

func health(ctx context.Context, l *redlock.Locker, c config, out printer) error {
	// A guarded read on every node: this Locker's guard examines each
	// node's marker (when its memory began) as it reads.
	probe, err := l.Inspect(ctx, c.probe)
	if err != nil {
		return fmt.Errorf("health: -probe %q: %w", c.probe, err)
	}
	var failed []error
	var rows []nodeHealth
	for i, h := range l.Health() {
		r := nodeHealth{Node: h.Node, Name: h.Name, Role: h.Role, Version: h.Version, Replicas: h.Replicas, RTTms: ms(h.RTT),
			QuarantineLeftMs: ms(h.QuarantineLeft), QuarantineCause: h.QuarantineCause, Durable: h.Durability.Durable,
			AppendOnly: h.Durability.AppendOnly, AppendFsync: h.Durability.AppendFsync, MaxmemoryPolicy: h.MaxmemoryPolicy, Evicts: h.Evicts}
		err := h.Err
		if perr := probe.Nodes[i].Err; perr != nil {
			err = errors.Join(err, fmt.Errorf("guard examination (reading -probe %q): %w", c.probe, perr))
		}
		if err != nil {
			r.Error = err.Error()
			failed = append(failed, fmt.Errorf("%s: %w", h.Name, err))
		}
		rows = append(rows, r)
	}
	out.emit(rows, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "NODE\tROLE\tVERSION\tREPLICAS\tRTT\tQUARANTINE\tDURABLE\tEVICTS\tERROR")
		for _, r := range rows {
			durable := "no"
			if r.Durable {
				durable = "yes"
			}
			evicts := "no"
			if r.Evicts {
				evicts = "yes (" + r.MaxmemoryPolicy + ")"
			}
			rtt := time.Duration(r.RTTms * float64(time.Millisecond)).Round(time.Microsecond)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%s\t%s\t%s\t%s\n", r.Name, orDash(r.Role), orDash(r.Version), r.Replicas, rtt,
				quarantineText(time.Duration(r.QuarantineLeftMs*float64(time.Millisecond))), durable, evicts, orDash(r.Error))
		}
		for _, r := range rows {
			if r.QuarantineCause != "" {
				fmt.Fprintf(tw, "\n%s is quarantined: %s\n", r.Name, r.QuarantineCause)
			}
		}
	})
	if len(failed) > 0 {
		return fmt.Errorf("health: %d of %d nodes could not be read: %w", len(failed), len(rows), errors.Join(failed...))
	}
	return nil
}

// inspection is Locker.Inspect's answer, for JSON.
type inspection struct {
	Key       string    `json:"key"`
	Holder    string    `json:"holder,omitempty"`
	Owner     string    `json:"owner,omitempty"`
	Token     uint64    `json:"token,omitempty"`
	HeldForMs float64   `json:"held_for_ms"`
	Nodes     []holding `json:"nodes"`
}

type holding struct {
	Node             int     `json:"node"`
	Name             string  `json:"name"`
	Held             bool    `json:"held"`
	Value            string  `json:"value,omitempty"`
	Owner            string  `json:"owner,omitempty"`
	TTLms            float64 `json:"ttl_ms"`
	Counter          uint64  `json:"fencing_counter"`
	Token            uint64  `json:"token,omitempty"`
	Revoked          string  `json:"revoked,omitempty"`
	QuarantineLeftMs float64 `json:"quarantine_left_ms"`
	QuarantineCause  string  `json:"quarantine_cause,omitempty"`
	Error            string  `json:"error,omitempty"`
}

func toInspection(in redlock.Inspection) inspection {
	out := inspection{Key: in.Key, Holder: in.Holder, Owner: in.Owner, Token: in.Token, HeldForMs: ms(in.HeldFor), Nodes: []holding{}}
	for _, n := range in.Nodes {
		out.Nodes = append(out.Nodes, holding{Node: n.Node, Name: n.Name, Held: n.Held, Value: n.Value, Owner: n.Owner, TTLms: ms(n.TTL),
			Counter: n.Counter, Token: n.Token, Revoked: n.Revoked, QuarantineLeftMs: ms(n.QuarantineLeft), QuarantineCause: n.QuarantineCause, Error: errText(n.Err)})
	}
	return out
}

// printInspection writes the inspection's table.
func printInspection(tw *tabwriter.Writer, in redlock.Inspection) {
	fmt.Fprintln(tw, "NODE\tHELD\tOWNER\tVALUE\tTTL\tTOKEN\tCOUNTER\tREVOKED\tQUARANTINE\tERROR")
	for _, n := range in.Nodes {
		held := "no"
		if n.Held {
			held = "yes"
		}
		if n.Err != nil {
			held = "?"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, held, orDash(n.Owner), orDash(n.Value), ttlText(n.Held, n.TTL),
			numberOrDash(n.Token), numberOrDash(n.Counter), orDash(n.Revoked), quarantineText(n.QuarantineLeft), orDash(errText(n.Err)))
	}
	switch {
	case in.Holder == "":
		fmt.Fprintf(tw, "\n%s: no majority holds it\n", in.Key)
	case in.HeldFor < 0:
		fmt.Fprintf(tw, "\n%s: held by %s on a majority, with no expiry (not a lease of this library's)\n", in.Key, holderName(in))
	default:
		fmt.Fprintf(tw, "\n%s: held by %s on a majority for %v more, unless extended\n", in.Key, holderName(in), in.HeldFor.Round(time.Millisecond))
	}
	if in.Token != 0 {
		fmt.Fprintf(tw, "%s: the holder's fencing token is %d, as its Lease.Token() says (counter %d, node label %d: token = counter<<8 | label)\n",
			in.Key, in.Token, in.Token>>8, in.Token&0xff)
	}
}

// numberOrDash is n, or "-" for 0 (none).
func numberOrDash(n uint64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatUint(n, 10)
}

func holderName(in redlock.Inspection) string {
	if in.Owner != "" {
		return fmt.Sprintf("%q (value %s)", in.Owner, in.Holder)
	}
	return "value " + in.Holder
}

// unread is the error for the nodes an inspection could not read.
func unread(in redlock.Inspection) error {
	var failed []error
	for _, n := range in.Nodes {
		if n.Err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", n.Name, n.Err))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("inspect %q: %d of %d nodes could not be read: %w", in.Key, len(failed), len(in.Nodes), errors.Join(failed...))
}

func inspect(ctx context.Context, l *redlock.Locker, key string, out printer) error {
	in, err := l.Inspect(ctx, key)
	if err != nil {
		return err
	}
	out.emit(toInspection(in), func(tw *tabwriter.Writer) { printInspection(tw, in) })
	return unread(in)
}

// revocation is Locker.Revoke's answer, for JSON.
type revocation struct {
	Key     string      `json:"key"`
	By      string      `json:"by"`
	DryRun  bool        `json:"dry_run"`
	Nodes   []revoked   `json:"nodes,omitempty"`
	Current *inspection `json:"current,omitempty"` // with a dry run: what -yes would delete
	Error   string      `json:"error,omitempty"`
}

type revoked struct {
	Node    int     `json:"node"`
	Name    string  `json:"name"`
	Deleted bool    `json:"deleted"`
	Value   string  `json:"value,omitempty"`
	Owner   string  `json:"owner,omitempty"`
	TTLms   float64 `json:"ttl_ms"`
	Error   string  `json:"error,omitempty"`
}

func revoke(ctx context.Context, l *redlock.Locker, c config, out printer) error {
	if !c.yes {
		in, err := l.Inspect(ctx, c.key)
		if err != nil {
			return err
		}
		cur := toInspection(in)
		out.emit(revocation{Key: c.key, By: c.owner, DryRun: true, Current: &cur}, func(tw *tabwriter.Writer) {
			printInspection(tw, in)
			fmt.Fprintf(tw, "\nnothing revoked: run again with -yes to delete %q on every node, whatever it holds\n", c.key)
		})
		return unread(in)
	}
	rev, err := l.Revoke(ctx, c.key)
	if rev.Nodes == nil && err != nil {
		return err // the call could not be made (an invalid key)
	}
	res := revocation{Key: c.key, By: c.owner, Error: errText(err)}
	for _, n := range rev.Nodes {
		res.Nodes = append(res.Nodes, revoked{Node: n.Node, Name: n.Name, Deleted: n.Deleted, Value: n.Value, Owner: n.Owner, TTLms: ms(n.TTL), Error: errText(n.Err)})
	}
	out.emit(res, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "NODE\tDELETED\tOWNER\tVALUE\tTTL LEFT\tERROR")
		for _, n := range rev.Nodes {
			deleted := "no (not held)"
			if n.Deleted {
				deleted = "yes"
			}
			if n.Err != nil {
				deleted = "?"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, deleted, orDash(n.Owner), orDash(n.Value), ttlText(n.Deleted, n.TTL), orDash(errText(n.Err)))
		}
		switch holders := rev.Holders(); len(holders) {
		case 0:
			fmt.Fprintf(tw, "\n%s: no node held it\n", c.key)
		default:
			fmt.Fprintf(tw, "\n%s: revoked by %s; the holder's next extension fails (its Do is cancelled with ErrLost)\n", c.key, c.owner)
		}
	})
	return err
}

// trusted is what trust did, for JSON.
type trusted struct {
	DryRun bool             `json:"dry_run"`
	Nodes  []quarantineView `json:"nodes"`
	Error  string           `json:"error,omitempty"`
}

type quarantineView struct {
	Node             int     `json:"node"`
	Name             string  `json:"name"`
	QuarantineLeftMs float64 `json:"quarantine_left_ms"`
	QuarantineCause  string  `json:"quarantine_cause,omitempty"`
}

func trust(ctx context.Context, l *redlock.Locker, c config, out printer) error {
	// The guard learns each node's state from its marker as it reads.
	if _, err := l.Inspect(ctx, c.probe); err != nil {
		return fmt.Errorf("trust: -probe %q: %w", c.probe, err)
	}
	var err error
	if c.yes {
		err = l.TrustNodes(ctx)
	}
	res := trusted{DryRun: !c.yes, Error: errText(err)}
	for _, h := range l.Health() {
		res.Nodes = append(res.Nodes, quarantineView{Node: h.Node, Name: h.Name, QuarantineLeftMs: ms(h.QuarantineLeft), QuarantineCause: h.QuarantineCause})
	}
	out.emit(res, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "NODE\tQUARANTINE\tCAUSE")
		for _, n := range res.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", n.Name, quarantineText(time.Duration(n.QuarantineLeftMs*float64(time.Millisecond))), orDash(n.QuarantineCause))
		}
		if !c.yes {
			fmt.Fprintln(tw, "\nnothing changed: run again with -yes to declare every node's memory whole (only for nodes known to hold no locks in use)")
		} else if err == nil {
			fmt.Fprintln(tw, "\nevery node is trusted: its memory counts as whole for every Locker (a clock jump's quarantine stays)")
		}
	})
	return err
}
