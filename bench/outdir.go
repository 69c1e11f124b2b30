package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
)

// plotNames are the charts plots.Write draws, each as .png and .svg.
var plotNames = []string{"inflight", "latency_cdf", "queue"}

// OutputFiles are the names WriteFiles writes into its directory.
func OutputFiles() []string {
	names := []string{"report.json", "trace.jsonl", "series.json"}
	for _, p := range plotNames {
		names = append(names, p+".png", p+".svg")
	}
	return names
}

// CheckOutDir says whether WriteFiles may write into dir: it may if dir
// does not exist, is empty, or holds only files a bench run writes (an
// earlier run's output, which a new run replaces). Anything else may be
// someone's work that a run would mix its files into, so it is refused
// before the run starts rather than after it.
func CheckOutDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		if st, serr := os.Stat(dir); serr == nil && !st.IsDir() {
			return fmt.Errorf("bench: --out %s is a file, not a directory", dir)
		}
		return fmt.Errorf("bench: --out %s: %w", dir, err)
	}
	ours := map[string]bool{}
	for _, n := range OutputFiles() {
		ours[n] = true
	}
	var foreign []string
	for _, e := range entries {
		if !ours[e.Name()] || e.IsDir() {
			foreign = append(foreign, e.Name())
		}
	}
	return refuseForeign(dir, foreign, "bench run", "run's")
}

// refuseForeign is the refusal of --out dir for the entries foreign that
// no maker (a bench run, a suite) wrote there; nil when there are none.
func refuseForeign(dir string, foreign []string, maker, makers string) error {
	if len(foreign) == 0 {
		return nil
	}
	sort.Strings(foreign)
	if len(foreign) > 3 {
		foreign = append(foreign[:3], fmt.Sprintf("and %d more", len(foreign)-3))
	}
	return fmt.Errorf("bench: --out %s is not empty and no %s made it (it holds %s); name a new or empty directory, or an earlier %s",
		dir, maker, strings.Join(foreign, ", "), makers)
}
