package dashboard

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// The plot's geometry, in SVG user units.
const (
	plotWidth  = 960
	plotHeight = 280
	padLeft    = 56
	padRight   = 16
	padTop     = 16
	padBottom  = 44
)

// palette colours the series, in order (Okabe–Ito, safe for colour-blind
// readers), repeating after the last.
var palette = []string{"#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000"}

func seriesColor(i int) string { return palette[i%len(palette)] }

// renderPlot draws r as an SVG line chart: one polyline per source (with a
// point per bucket whose title is its count), a y axis of event counts and
// an x axis of bucket times in UTC. Every text is escaped here, since the
// result is trusted HTML.
func renderPlot(r rates) template.HTML {
	esc := template.HTMLEscapeString
	var b strings.Builder
	n := len(r.Starts)
	fmt.Fprintf(&b, `<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		plotWidth, plotHeight, esc(fmt.Sprintf("Events per %s per source", humanDuration(r.Bucket))))
	var peak int64
	for _, s := range r.Series {
		for _, c := range s.Counts {
			peak = max(peak, c)
		}
	}
	top, step := yScale(peak)
	innerW := float64(plotWidth - padLeft - padRight)
	innerH := float64(plotHeight - padTop - padBottom)
	x := func(i int) float64 {
		if n <= 1 {
			return padLeft + innerW/2
		}
		return padLeft + innerW*float64(i)/float64(n-1)
	}
	y := func(v int64) float64 { return padTop + innerH*(1-float64(v)/float64(top)) }

	// Grid and y labels.
	b.WriteString(`<g class="axis y">`)
	for v := int64(0); v <= top; v += step {
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#d0d7de" stroke-width="1"/>`,
			padLeft, plotWidth-padRight, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle" font-size="12" fill="#57606a">%d</text>`,
			padLeft-8, y(v), v)
	}
	b.WriteString(`</g>`)

	// x labels: at most about eight, on whole buckets.
	b.WriteString(`<g class="axis x">`)
	every := max(1, (n+7)/8)
	for i := 0; i < n; i += every {
		t := r.Starts[i].UTC()
		label := t.Format("15:04")
		if i == 0 || t.YearDay() != r.Starts[max(0, i-every)].UTC().YearDay() {
			label = t.Format("Jan 2 15:04")
		}
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#8c959f" stroke-width="1"/>`,
			x(i), x(i), plotHeight-padBottom, plotHeight-padBottom+5)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="12" fill="#57606a">%s</text>`,
			x(i), plotHeight-padBottom+20, esc(label))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" font-size="11" fill="#57606a">UTC, one point per %s</text>`,
		plotWidth-padRight, plotHeight-4, esc(humanDuration(r.Bucket)))
	b.WriteString(`</g>`)
	fmt.Fprintf(&b, `<line class="axis-line" x1="%d" x2="%d" y1="%d" y2="%d" stroke="#57606a" stroke-width="1"/>`,
		padLeft, plotWidth-padRight, plotHeight-padBottom, plotHeight-padBottom)

	// Series.
	for i, s := range r.Series {
		color := seriesColor(i)
		fmt.Fprintf(&b, `<g class="series" data-source="%s" data-total="%d">`, esc(s.Source), s.Total)
		fmt.Fprintf(&b, `<title>%s: %d events</title>`, esc(s.Source), s.Total)
		points := make([]string, len(s.Counts))
		for j, c := range s.Counts {
			points[j] = fmt.Sprintf("%.1f,%.1f", x(j), y(c))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" points="%s"/>`,
			color, strings.Join(points, " "))
		for j, c := range s.Counts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s</title></circle>`,
				x(j), y(c), color, esc(fmt.Sprintf("%s, %s: %d", s.Source, r.Starts[j].UTC().Format("Jan 2 15:04"), c)))
		}
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // G203: every interpolated text is escaped above
}

// yScale returns the top of the y axis (at least peak, at least 1) and a
// tick step dividing it into at most five whole, round steps.
func yScale(peak int64) (top, step int64) {
	if peak <= 0 {
		return 1, 1
	}
	step = 1
	for {
		for _, m := range []int64{1, 2, 5} {
			if s := step * m; (peak+s-1)/s <= 5 {
				return ((peak + s - 1) / s) * s, s
			}
		}
		step *= 10
	}
}

// humanDuration is d for people: "1h", "15m", "1h30m", "2d3h".
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	d = d.Round(time.Second)
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	h, m, s := d/time.Hour, (d%time.Hour)/time.Minute, (d%time.Minute)/time.Second
	var parts []string
	if days > 0 {
		parts = append(parts, fmt.Sprintf("%dd", days))
	}
	if h > 0 {
		parts = append(parts, fmt.Sprintf("%dh", h))
	}
	if m > 0 && days == 0 {
		parts = append(parts, fmt.Sprintf("%dm", m))
	}
	if s > 0 && days == 0 && h == 0 {
		parts = append(parts, fmt.Sprintf("%ds", s))
	}
	if len(parts) == 0 {
		return "0s"
	}
	return strings.Join(parts, "")
}
