package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// SuiteOptions configure RunSuite.
type SuiteOptions struct {
	// Scenarios to run, in order. Empty means SuiteScenarios().
	Scenarios []string
	// Short scales every scenario down by ShortFactor (Scenario.Short).
	Short bool
	// Repeat runs each scenario's modes this many times (Options.Repeat).
	Repeat int
	// Progress, if set, gets each run's progress (Options.Progress).
	Progress io.Writer
	// Command is the command line to print with the figures.
	Command string
	// Parallel is how many scenarios run at once; zero or one means one
	// after the other, as figures meant for reading must be run: at once
	// they share the machine's cores and each other's timing.
	Parallel int
}

// Suite is what RunSuite measured: each scenario's report and verdict.
type Suite struct {
	Command   string       `json:"command"`
	Short     bool         `json:"short"`
	Repeat    int          `json:"repeat"`
	Version   string       `json:"sluice_version"`
	StartedAt time.Time    `json:"started_at"`
	Took      float64      `json:"took_s"`
	Entries   []SuiteEntry `json:"scenarios"`
}

// SuiteEntry is one scenario of the suite.
type SuiteEntry struct {
	Scenario    string          `json:"scenario"`
	Description string          `json:"description"`
	Modes       []string        `json:"modes"`
	Alone       string          `json:"alone,omitempty"` // the companion's name
	Tenant      string          `json:"tenant,omitempty"`
	Verdict     ScenarioVerdict `json:"verdict"`
	Took        float64         `json:"took_s"` // the scenario's and its companion's runs

	Report      *Report `json:"-"`
	AloneReport *Report `json:"-"`
}

// SuiteScenarios are the built-in scenarios the suite runs: every one
// but the companions another names as its "alone", which run with it.
func SuiteScenarios() []string {
	companion := map[string]bool{}
	names := Builtin()
	for _, n := range names {
		if sc, err := LoadScenario(n); err == nil && sc.Alone != nil {
			companion[sc.Alone.Scenario] = true
		}
	}
	return slices.DeleteFunc(names, func(n string) bool { return companion[n] })
}

// RunSuite runs each scenario through its modes (and its companion, if it
// names one, through the same modes it has) and computes its verdict.
func RunSuite(ctx context.Context, opt SuiteOptions) (*Suite, error) {
	names := opt.Scenarios
	if len(names) == 0 {
		names = SuiteScenarios()
	}
	s := &Suite{Command: opt.Command, Short: opt.Short, Repeat: max(opt.Repeat, 1), Version: buildVersion(), StartedAt: time.Now().UTC()}
	load := func(name string) (*Scenario, error) {
		sc, err := LoadScenario(name)
		if err != nil {
			return nil, err
		}
		if opt.Short {
			sc = sc.Short(ShortFactor)
		}
		return sc, nil
	}
	one := func(name string) (SuiteEntry, error) {
		began := time.Now()
		sc, err := load(name)
		if err != nil {
			return SuiteEntry{}, err
		}
		e := SuiteEntry{Scenario: sc.Name, Description: sc.Description, Modes: sc.DefaultModes()}
		if e.Report, err = Run(ctx, Options{Scenario: sc, Modes: e.Modes, Repeat: opt.Repeat, Progress: opt.Progress}); err != nil {
			return e, fmt.Errorf("suite: %s: %w", name, err)
		}
		if a := sc.Alone; a != nil {
			asc, err := load(a.Scenario)
			if err != nil {
				return e, fmt.Errorf("suite: %s: alone: %w", name, err)
			}
			// The companion runs the modes it has of the scenario's.
			var modes []string
			for _, m := range e.Modes {
				if m == ModeDirect || m == ModePlain || asc.Windowed(m) {
					modes = append(modes, m)
				}
			}
			e.Alone, e.Tenant = asc.Name, a.Tenant
			if e.AloneReport, err = Run(ctx, Options{Scenario: asc, Modes: modes, Repeat: opt.Repeat, Progress: opt.Progress}); err != nil {
				return e, fmt.Errorf("suite: %s: %w", a.Scenario, err)
			}
		}
		e.Verdict = VerdictOf(sc.Verdict, e.Report, e.AloneReport, e.Tenant)
		e.Took = time.Since(began).Seconds()
		if opt.Progress != nil {
			fmt.Fprintf(opt.Progress, "%s: %s\n", name, e.Verdict.Line)
		}
		return e, nil
	}
	s.Entries = make([]SuiteEntry, len(names))
	errs := make([]error, len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(opt.Parallel, 1) {
		wg.Go(func() {
			for i := range next {
				s.Entries[i], errs[i] = one(names[i])
			}
		})
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.Took = time.Since(s.StartedAt).Seconds()
	return s, nil
}

// suiteFiles are the files WriteFiles puts beside the scenarios'
// directories.
var suiteFiles = []string{"index.html", "summary.md", "suite.json"}

// CheckSuiteOutDir says whether a suite may write into dir: it may if dir
// does not exist, is empty, or holds only what a suite writes (its files,
// and directories named after built-in scenarios that CheckOutDir allows).
func CheckSuiteOutDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return CheckOutDir(dir) // its error says what dir is
	}
	var foreign []string
	for _, e := range entries {
		switch {
		case e.IsDir() && slices.Contains(Builtin(), e.Name()):
			if err := CheckOutDir(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		case !e.IsDir() && slices.Contains(suiteFiles, e.Name()):
		default:
			foreign = append(foreign, e.Name())
		}
	}
	return refuseForeign(dir, foreign, "suite", "suite's")
}

// WriteFiles writes each scenario's files (Report.WriteFiles, with plot)
// into a directory of its name, then suite.json, summary.md and
// index.html, the page with the plots inline (none when plot is nil).
func (s *Suite) WriteFiles(dir string, plot Plot) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Two at a time: drawing the plots is most of the work, and the
	// machine has two cores.
	errs := make([]error, len(s.Entries))
	turn := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, e := range s.Entries {
		wg.Go(func() {
			turn <- struct{}{}
			defer func() { <-turn }()
			errs[i] = e.Report.WriteFiles(filepath.Join(dir, e.Scenario), plot)
			if e.AloneReport != nil && errs[i] == nil {
				errs[i] = e.AloneReport.WriteFiles(filepath.Join(dir, e.Alone), plot)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "suite.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var md bytes.Buffer
	s.WriteMarkdown(&md)
	if err := os.WriteFile(filepath.Join(dir, "summary.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	var page bytes.Buffer
	if err := s.writeHTML(&page, dir, plot != nil); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "index.html"), page.Bytes(), 0o644)
}

// about is the suite's circumstances in a line: the command, the build,
// the seeds, how long it took.
func (s *Suite) about() string {
	short := ""
	if s.Short {
		short = fmt.Sprintf(", short (every scenario %.2g× as long)", ShortFactor)
	}
	seeds := "one seed a scenario"
	if s.Repeat > 1 {
		seeds = fmt.Sprintf("%d seeds a scenario, each figure the median [min .. max]", s.Repeat)
	}
	return fmt.Sprintf("`%s`: sluice %s, %s%s, %.0f s, %s", s.Command, s.Version, seeds, short, s.Took, s.StartedAt.Format("2006-01-02 15:04 MST"))
}

// WriteMarkdown writes the summary: the verdicts, then each scenario's
// table.
func (s *Suite) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "# sluice bench --suite\n\n%s\n\n", s.about())
	fmt.Fprintln(w, "| scenario | verdict |\n|---|---|")
	for _, e := range s.Entries {
		fmt.Fprintf(w, "| %s | %s |\n", e.Scenario, mdCell(e.Verdict.Line))
	}
	for _, e := range s.Entries {
		fmt.Fprintf(w, "\n## %s\n\n%s\n\n**%s**\n\n", e.Scenario, e.Description, e.Verdict.Line)
		writeMarkdownTable(w, e.Report)
		if e.AloneReport != nil {
			fmt.Fprintf(w, "\n%s alone (%s):\n\n", e.Tenant, e.Alone)
			writeMarkdownTable(w, e.AloneReport)
		}
	}
}

func writeMarkdownTable(w io.Writer, r *Report) {
	lines := r.TableLines()
	for i, line := range lines {
		cells := make([]string, len(lines[0]))
		for j := range cells {
			if j < len(line) {
				cells[j] = mdCell(line[j])
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		if i == 0 {
			fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(cells)))
		}
	}
}

func mdCell(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "|", `\|`) }

// writeHTML writes the self-contained page: inline CSS, each scenario's
// verdict, table and, when drawn, plots (the SVGs WriteFiles wrote into
// dir, inline).
func (s *Suite) writeHTML(w io.Writer, dir string, plotted bool) error {
	type section struct {
		Name, Desc, Verdict, Outcome string
		Lines                        [][]string
		AloneName, Tenant            string
		AloneLines                   [][]string
		Plots                        []template.HTML
	}
	data := struct {
		About    string
		Sections []section
	}{About: strings.ReplaceAll(s.about(), "`", "")}
	for _, e := range s.Entries {
		sec := section{Name: e.Scenario, Desc: e.Description, Verdict: e.Verdict.Line, Outcome: e.Verdict.Outcome,
			Lines: e.Report.TableLines(), AloneName: e.Alone, Tenant: e.Tenant}
		if e.AloneReport != nil {
			sec.AloneLines = e.AloneReport.TableLines()
		}
		for _, p := range plotNames {
			if !plotted {
				break
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Scenario, p+".svg"))
			if err != nil {
				return err
			}
			if i := bytes.Index(b, []byte("<svg")); i > 0 {
				b = b[i:] // the XML declaration has no place inside HTML
			}
			sec.Plots = append(sec.Plots, template.HTML(b)) // our own plot, drawn by plots.Write
		}
		data.Sections = append(data.Sections, sec)
	}
	return suitePage.Execute(w, data)
}

var suitePage = template.Must(template.New("suite").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice bench --suite</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:72rem;padding:1rem;color:#222}
h1{font-size:1.4rem}h2{font-size:1.2rem;margin-top:2.5rem;border-top:1px solid #ddd;padding-top:1rem}
.verdict{font-weight:600;padding:.5rem .75rem;border-left:4px solid #888;background:#f6f6f6}
.wins{border-color:#2a7}.loses{border-color:#c33}.mixed{border-color:#d90}
.scroll{overflow-x:auto}.scroll::before{content:"the table scrolls sideways on a narrow screen";display:block;font-size:.8rem;color:#777}
@media(min-width:48rem){.scroll::before{display:none}}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:.85rem}
td,th{padding:.15rem .6rem;text-align:right;white-space:nowrap;border-bottom:1px solid #eee}
td:first-child,th:first-child{text-align:left}
svg{max-width:100%;height:auto;display:block;margin:.75rem 0}
.about{color:#555}
</style></head><body>
<h1>sluice bench --suite</h1>
<p class="about">{{.About}}</p>
<ul>{{range .Sections}}<li><a href="#{{.Name}}">{{.Name}}</a>: {{.Verdict}}</li>{{end}}</ul>
{{range .Sections}}
<h2 id="{{.Name}}">{{.Name}}</h2>
<p>{{.Desc}}</p>
<p class="verdict {{.Outcome}}">{{.Verdict}}</p>
<div class="scroll"><table>{{range $i, $l := .Lines}}<tr>{{range $l}}{{if eq $i 0}}<th>{{.}}</th>{{else}}<td>{{.}}</td>{{end}}{{end}}</tr>{{end}}</table></div>
{{if .AloneLines}}<p>{{.Tenant}} alone ({{.AloneName}}):</p>
<div class="scroll"><table>{{range $i, $l := .AloneLines}}<tr>{{range $l}}{{if eq $i 0}}<th>{{.}}</th>{{else}}<td>{{.}}</td>{{end}}{{end}}</tr>{{end}}</table></div>{{end}}
{{range .Plots}}{{.}}{{end}}
{{end}}
</body></html>
`))

// finite is v, or 0 when it is not a number JSON can hold (a ratio over
// zero): the figure's text still says what it was.
func finite(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return v
}
