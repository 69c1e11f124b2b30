package gate

import "testing"

// A class's name reads back as the class, so the header, the keys file
// and the logs spell it one way.
func TestClassNames(t *testing.T) {
	for c := Class(0); c < numClasses; c++ {
		got, err := ParseClass(c.String())
		if err != nil || got != c {
			t.Errorf("ParseClass(%q) = %v, %v; want %v", c.String(), got, err, c)
		}
	}
	if c, err := ParseClass(""); err != nil || c != ClassInteractive {
		t.Errorf(`ParseClass("") = %v, %v; want interactive`, c, err)
	}
	for _, bad := range []string{"Batch", "bulk", " batch"} {
		if _, err := ParseClass(bad); err == nil {
			t.Errorf("ParseClass(%q) accepted it", bad)
		}
	}
}
