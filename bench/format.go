package bench

import (
	"math"
	"strconv"
)

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// grouped formats v with commas between groups of three digits: 3,456,789.
func grouped(v int64) string {
	s := strconv.FormatInt(v, 10)
	neg := false
	if v < 0 {
		neg, s = true, s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3+1)
	if neg {
		out = append(out, '-')
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// sig3 formats v with about three significant figures and no exponent.
func sig3(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

// si formats v with an SI prefix and three significant figures, separated
// by a space: "1.23 M", "456 k", "12.0".
func si(v float64) string {
	n, prefix := siSplit(v)
	if prefix == "" {
		return n
	}
	return n + " " + prefix
}

// siUnit formats v with the SI prefix glued to unit: "10.0 MB/s", "12.0 B/s".
func siUnit(v float64, unit string) string {
	n, prefix := siSplit(v)
	return n + " " + prefix + unit
}

func siSplit(v float64) (string, string) {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return sig3(v / 1e9), "G"
	case a >= 1e6:
		return sig3(v / 1e6), "M"
	case a >= 1e3:
		return sig3(v / 1e3), "k"
	default:
		return sig3(v), ""
	}
}

// tickLabel formats an axis tick without trailing zeros: "2", "0.5",
// "50 k", "1.5 M".
func tickLabel(v float64) string {
	return strconv.FormatFloat(roundTo(v, 9), 'f', -1, 64)
}

func siTickLabel(v float64) string {
	for _, p := range []struct {
		div    float64
		prefix string
	}{{1e9, " G"}, {1e6, " M"}, {1e3, " k"}} {
		if math.Abs(v) >= p.div {
			return tickLabel(v/p.div) + p.prefix
		}
	}
	return tickLabel(v)
}

// roundTo rounds v to digits significant digits, hiding float noise such as
// 0.30000000000000004 from repeated addition.
func roundTo(v float64, digits int) float64 {
	if v == 0 {
		return 0
	}
	scale := math.Pow(10, float64(digits)-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*scale) / scale
}

// duration formats a latency given in microseconds: "45.0 µs", "1.23 ms",
// "2.50 s".
func duration(us float64) string {
	switch {
	case us >= 1e6:
		return sig3(us/1e6) + " s"
	case us >= 1e3:
		return sig3(us/1e3) + " ms"
	default:
		return sig3(us) + " µs"
	}
}
