// Package chart holds what the HTML reports of lockctl bench and lockctl
// chaos draw their charts with alike: element ids, round axis steps and
// labels cut to fit.
package chart

import (
	"math"
	"strings"
	"unicode/utf8"
)

// ID is an HTML id from prefix and parts, joined by "-", each part in
// lower case with every character other than a-z and 0-9 turned into
// "-": ID("s", "Hot key") is "s-hot-key".
func ID(prefix string, parts ...string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, part := range parts {
		b.WriteByte('-')
		for _, r := range strings.ToLower(part) {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				b.WriteRune(r)
			} else {
				b.WriteByte('-')
			}
		}
	}
	return b.String()
}

// Step is the round step (1, 2 or 5 times a power of ten) closest above
// raw, which must be positive: an axis cut into parts of at least raw.
func Step(raw float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

// Shorten cuts s to n characters, marking the cut with an ellipsis.
func Shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
