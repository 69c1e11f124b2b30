package sqlq

import "testing"

func TestDollar(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT 1":                             "SELECT 1",
		"INSERT INTO t (a, b) VALUES (?, ?)":   "INSERT INTO t (a, b) VALUES ($1, $2)",
		"UPDATE t SET é = ? WHERE id = ? -- ü": "UPDATE t SET é = $1 WHERE id = $2 -- ü",
	} {
		if got := Dollar(in); got != want {
			t.Errorf("Dollar(%q) = %q; want %q", in, got, want)
		}
	}
}
