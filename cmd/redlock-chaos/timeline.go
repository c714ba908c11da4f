package main

import (
	"fmt"
	"html"
	"os"
	"strings"
	"time"
)

// Timeline geometry, in SVG user units.
const (
	tlWidth   = 1400.0
	tlLeft    = 90.0
	tlRight   = 20.0
	tlTop     = 40.0
	tlClientH = 24.0
	tlNodeH   = 16.0
)

var keyColours = []string{"#4e79a7", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f"}

var faultColours = map[string]string{
	"freeze": "#bab0ac", "kill": "#e15759", "outage": "#8b0000", "amnesia": "#d37295", "snapshot": "#f28e2b", "partition": "#79706e",
	"blackhole": "#555555", "latency": "#edc948", "scriptflush": "#b07aa1", "flush": "#ff9da7",
	"evict": "#9c755f", "pause": "#bab0ac", "rollback": "#c85200", "pressure": "#5c3c22", "clockjump": "#17becf",
	"failover": "#7b3294", "clockrate": "#0b8fa3", "lostreply": "#a0a0ff", "stall": "#d0c0a0",
}

// writeTimeline draws the run: a row per client with its leases (coloured
// by key) and writes (accepted: a tick above the lease; refused: a hollow
// box), pauses shaded;
// a row per node with its faults; violations marked in red.
func writeTimeline(path string, r *result) error {
	clients, nodes := 0, 0
	for _, l := range r.Leases {
		clients = max(clients, l.Client+1)
	}
	for _, f := range r.Faults {
		clients = max(clients, f.Client+1)
		nodes = max(nodes, f.Node+1)
		for _, n := range f.Nodes {
			nodes = max(nodes, n+1)
		}
	}
	span := r.Duration
	for _, l := range r.Leases {
		span = max(span, l.end())
	}
	span = max(span, time.Second)
	x := func(d time.Duration) float64 {
		return tlLeft + (tlWidth-tlLeft-tlRight)*float64(d)/float64(span)
	}
	clientY := func(c int) float64 { return tlTop + float64(c)*tlClientH }
	nodeTop := tlTop + float64(clients)*tlClientH + 20
	nodeY := func(n int) float64 { return nodeTop + float64(n)*tlNodeH }
	height := nodeTop + float64(nodes)*tlNodeH + 70

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", tlWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	c := r.Counts
	fmt.Fprintf(&b, `<text x="%.0f" y="16" font-size="13">redlock-chaos seed %d, %s configuration, %s: %d leases, %d overlapping, %d stale accepted, %d increments lost, linearizable: %s</text>`+"\n",
		tlLeft, r.Seed, r.Config, html.EscapeString(r.Server), c.Leases, c.Overlaps, c.StaleAccepted, c.LostIncrements, r.Linearizable)
	// Seconds.
	step := time.Second
	for span/step > 30 {
		step *= 5
	}
	for t := time.Duration(0); t <= span; t += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#eee"/><text x="%.1f" y="%.0f" text-anchor="middle" fill="#888">%v</text>`+"\n",
			x(t), tlTop-4, x(t), height-50, x(t), tlTop-8, t)
	}
	for i := range clients {
		fmt.Fprintf(&b, `<text x="4" y="%.1f">client %d</text>`+"\n", clientY(i)+tlClientH/2+4, i)
	}
	for i := range nodes {
		fmt.Fprintf(&b, `<text x="4" y="%.1f">node %d</text>`+"\n", nodeY(i)+tlNodeH/2+4, i)
	}
	// Faults: pauses on their client's row, the rest on their node's.
	for _, f := range r.Faults {
		if f.Began < 0 {
			continue
		}
		end := max(f.Ended, f.Began+span/500) // an instant fault stays visible
		title := html.EscapeString(f.String())
		if f.Client >= 0 {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="0.5"><title>%s</title></rect>`+"\n",
				x(f.Began), clientY(f.Client), x(end)-x(f.Began), tlClientH, faultColours[f.Kind], title)
			continue
		}
		for _, node := range append([]int{f.Node}, f.Nodes...) {
			if node >= 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n",
					x(f.Began), nodeY(node)+1, x(end)-x(f.Began), tlNodeH-2, faultColours[f.Kind], title)
			}
		}
	}
	// Leases.
	for _, l := range r.Leases {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="0.75"><title>key %d, token %d, %v to %v</title></rect>`+"\n",
			x(l.Acquired), clientY(l.Client)+5, max(x(l.end())-x(l.Acquired), 0.5), tlClientH-10, keyColours[l.Key%len(keyColours)],
			l.Key, l.Token, l.Acquired.Round(time.Millisecond), l.end().Round(time.Millisecond))
	}
	// Writes: accepted ones a short tick above the lease, refused ones a
	// hollow box across it.
	for _, a := range r.Accesses {
		if !a.Write {
			continue
		}
		l := r.Leases[a.Lease]
		y := clientY(l.Client)
		if a.Accepted {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222" stroke-width="0.6"><title>write %d accepted</title></line>`+"\n",
				x(a.Call), y+1, x(a.Call), y+5, a.Value)
			continue
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="5" height="%.1f" fill="white" stroke="#222"><title>write %d refused</title></rect>`+"\n",
			x(a.Call)-2.5, y+3, tlClientH-6, a.Value)
	}
	// Violations.
	for _, m := range c.Marks {
		y := clientY(m.Client)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="red" opacity="0.35" stroke="red"><title>%s</title></rect>`+"\n",
			x(time.Duration(m.At)), y+1, max(x(time.Duration(m.Until))-x(time.Duration(m.At)), 3), tlClientH-2, m.Kind)
	}
	// Legend.
	ly := height - 30
	lx := tlLeft
	legend := func(colour, label string, hollow bool) {
		fill := colour
		if hollow {
			fill = "none"
		}
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="12" height="12" fill="%s" stroke="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", lx, ly, fill, colour, lx+16, ly+10, label)
		lx += 22 + 7*float64(len(label))
	}
	for k := range min(len(keyColours), max(1, countKeys(r))) {
		legend(keyColours[k], fmt.Sprintf("lease on key %d", k), false)
	}
	legend("#222", "write accepted", false)
	legend("#222", "write refused", true)
	legend("red", "violation", false)
	ly += 16
	lx = tlLeft
	for _, k := range faultKinds {
		legend(faultColours[k], k, false)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func countKeys(r *result) int {
	n := 0
	for _, l := range r.Leases {
		n = max(n, l.Key+1)
	}
	return n
}
