package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// writePlot writes an SVG with the cycle-latency CDF of each implementation:
// latency on a log scale across, the fraction of cycles at or below it up.
func writePlot(w io.Writer, title string, rs []*result) error {
	const width, height, left, right, top, bottom = 1000.0, 540.0, 70.0, 270.0, 60.0, 60.0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rs {
		for _, p := range r.cycle.cdf() {
			lo, hi = math.Min(lo, p[0]), math.Max(hi, p[0])
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = float64(time.Microsecond), float64(time.Second)
	}
	lo = math.Pow(10, math.Floor(math.Log10(math.Max(lo, 1))))
	hi = math.Pow(10, math.Ceil(math.Log10(math.Max(hi, lo*10))))
	x := func(v float64) float64 {
		return left + (math.Log10(math.Max(v, lo))-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*(width-left-right)
	}
	y := func(f float64) float64 { return top + (1-f)*(height-top-bottom) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, line := range strings.Split(title, "\n") {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" font-size="13">%s</text>`+"\n", left, 20+18*i, escape(line))
	}
	for d := lo; d <= hi*1.0001; d *= 10 { // vertical grid at each power of ten
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x(d), y(1), x(d), y(0))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(d), y(0)+18, fmtDur(time.Duration(d)))
	}
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 0.9, 1} {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x(lo), y(f), x(hi), y(f))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%g</text>`+"\n", x(lo)-6, y(f)+4, f)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">cycle latency (acquire + release), log scale</text>`+"\n", (left+width-right)/2, height-15)
	fmt.Fprintf(&b, `<text transform="translate(18,%.1f) rotate(-90)" text-anchor="middle">fraction of cycles</text>`+"\n", (top+height-bottom)/2)
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}
	for i, r := range rs {
		color := colors[i%len(colors)]
		var pts []string
		prev := 0.0
		for _, p := range r.cycle.cdf() {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x(p[0]), y(prev), x(p[0]), y(p[1])))
			prev = p[1]
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		}
		ly := top + 20 + float64(i)*20
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", width-right+15, ly, width-right+40, ly, color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s (p50 %s)</text>`+"\n", width-right+46, ly+4, escape(r.Impl), fmtDur(r.cycle.quantile(.5)))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
