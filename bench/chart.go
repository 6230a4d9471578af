package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// faultColors are the colours of the takeover markers, per fault kind.
var faultColors = map[string]string{FaultKill: "#d62728", FaultStop: "#9467bd", FaultSeize: "#ff7f0e", FaultTerm: "#2ca02c"}

// WriteSVG draws the run's timeline as an SVG image: delivered messages
// per second (top) and the latency p99 of each second (bottom), fencepost
// and raw JetStream (their rounds alternate), with each fault (takeover)
// marked by a vertical line coloured by kind.
func WriteSVG(w io.Writer, r Report) error {
	const (
		width, left, right = 960, 70, 20
		top, panelH, gap   = 50, 220, 60
		height             = top + 2*panelH + gap + 60
	)
	plotW := float64(width - left - right)
	n := len(r.Timeline)
	xMax := math.Max(float64(n), 1)
	x := func(sec float64) float64 { return float64(left) + plotW*sec/xMax }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("fencepost bench --scenario %s --size %s: %.0f vs %.0f msgs/s (%.2fx raw), p99 %.1f ms, takeovers %d, gap p99 %.0f ms, lost %d, stale commits %d",
		r.Scenario, r.Size, r.Throughput, r.RawThroughput, r.Ratio, r.LatencyP99, r.Takeovers, r.TakeoverGapP99, r.Lost, r.StaleCommits)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="13" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	legend := []struct{ color, label string }{{"#1f77b4", "fencepost"}, {"#999999", "raw JetStream"}}
	if r.Pcgroups != nil {
		legend = append(legend, struct{ color, label string }{peerColor, fmt.Sprintf("pcgroups (%.0f msgs/s, ours/pcgroups %.2fx)", r.Pcgroups.Throughput, r.RatioPcgroups)})
	}
	for k, c := range faultColors {
		for _, f := range r.Faults {
			if f.Kind == k {
				legend = append(legend, struct{ color, label string }{c, "fault: " + k})
				break
			}
		}
	}
	lx := left
	faults := r.Faults // ours', and the pcgroups side's in its rounds
	if r.Pcgroups != nil {
		faults = append(append([]Fault(nil), faults...), r.Pcgroups.Faults...)
	}
	for _, l := range legend {
		fmt.Fprintf(&b, `<line x1="%d" y1="36" x2="%d" y2="36" stroke="%s" stroke-width="3"/><text x="%d" y="40">%s</text>`+"\n", lx, lx+18, l.color, lx+22, html.EscapeString(l.label))
		lx += 30 + 8*len(l.label)
	}

	panel := func(y0 int, label string, ours, raw, peer func(Second) (float64, bool)) {
		yMax := 0.0
		for _, s := range r.Timeline {
			if v, ok := ours(s); ok {
				yMax = math.Max(yMax, v)
			}
			if v, ok := raw(s); ok {
				yMax = math.Max(yMax, v)
			}
			if v, ok := peer(s); ok {
				yMax = math.Max(yMax, v)
			}
		}
		yMax = niceCeil(yMax)
		y := func(v float64) float64 { return float64(y0+panelH) - float64(panelH)*v/yMax }
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%d" fill="none" stroke="#ccc"/>`+"\n", left, y0, plotW, panelH)
		for i := 0; i <= 4; i++ {
			v := yMax * float64(i) / 4
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left, y(v), float64(left)+plotW, y(v), left-6, y(v)+4, short(v))
		}
		fmt.Fprintf(&b, `<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>`+"\n", y0+panelH/2, y0+panelH/2, label)
		for _, f := range faults {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1" stroke-dasharray="4 2"><title>%s %s at %.1f s, gap %.0f ms</title></line>`+"\n",
				x(f.At), y0, x(f.At), y0+panelH, faultColors[f.Kind], f.Kind, html.EscapeString(f.Node), f.At, f.GapMs)
		}
		for _, series := range []struct {
			v     func(Second) (float64, bool)
			color string
		}{{raw, "#999999"}, {peer, peerColor}, {ours, "#1f77b4"}} {
			var pts []string
			flush := func() {
				if len(pts) > 0 {
					fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", series.color, strings.Join(pts, " "))
				}
				pts = pts[:0]
			}
			for _, s := range r.Timeline {
				v, ok := series.v(s)
				if !ok {
					flush()
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.At+0.5), y(v)))
			}
			flush()
		}
	}
	panel(top+10, "delivered msgs/s", func(s Second) (float64, bool) {
		return float64(s.Delivered), s.Delivered > 0 || (s.RawDelivered == 0 && s.PeerDelivered == 0)
	},
		func(s Second) (float64, bool) { return float64(s.RawDelivered), s.RawDelivered > 0 },
		func(s Second) (float64, bool) { return float64(s.PeerDelivered), s.PeerDelivered > 0 })
	panel(top+10+panelH+gap, "latency p99 ms (per second)", func(s Second) (float64, bool) { return s.P99, s.Delivered > 0 },
		func(s Second) (float64, bool) { return s.RawP99, s.RawDelivered > 0 },
		func(s Second) (float64, bool) { return s.PeerP99, s.PeerDelivered > 0 })
	// The time axis, under each panel.
	for _, y0 := range []int{top + 10 + panelH, top + 10 + 2*panelH + gap} {
		step := math.Max(1, niceCeil(xMax/10))
		for t := 0.0; t <= xMax; t += step {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%.0f</text>`+"\n", x(t), y0+16, t)
		}
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">seconds since the start (the sides alternate in rounds; dashed lines: faults)</text>`+"\n", float64(left)+plotW/2, height-12)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// peerColor is the pcgroups side's colour.
const peerColor = "#8c564b"

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 10 || v == 0:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
