// Package sqlq holds what the stores that speak both SQLite and
// PostgreSQL share about their queries' text.
package sqlq

import (
	"strconv"
	"strings"
)

// Dollar rewrites a query's ? placeholders as PostgreSQL's $1, $2...
// The queries it is given hold no ? but placeholders (no string literal
// or operator with one).
func Dollar(query string) string {
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c != '?' {
			b.WriteRune(c)
			continue
		}
		n++
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}
