package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestTmpRouteScenarios(t *testing.T) {
	names := strings.Split(os.Getenv("TMP_SCENARIOS"), ",")
	for _, n := range names {
		start := time.Now()
		s, err := RunSuite(context.Background(), SuiteOptions{Scenarios: []string{n}, Short: os.Getenv("TMP_SHORT") == "1", Command: "tmp"})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s took %v: %s", n, time.Since(start), s.Entries[0].Verdict.Line)
		if d := os.Getenv("TMP_OUT"); d != "" {
			if err := s.WriteFiles(d + "/" + n); err != nil {
				t.Fatal(err)
			}
		}
	}
}
