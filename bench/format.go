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

// si formats v with an SI prefix and three significant figures: "1.23 M",
// "456 k", "12.0 " (unit follows after the space).
func si(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return sig3(v/1e9) + " G"
	case a >= 1e6:
		return sig3(v/1e6) + " M"
	case a >= 1e3:
		return sig3(v/1e3) + " k"
	default:
		return sig3(v) + " "
	}
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
