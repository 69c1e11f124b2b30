package bench

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
)

// Plot draws a report's charts into dir, each as .png and .svg (the
// names OutputFiles lists). bench draws none itself: package bench/plots
// does (plots.Write), so that the sluice server, whose page runs the
// bench (web/benchtrace) but draws no chart, links no plotting library.
type Plot func(r *Report, dir string) error

// WriteFiles writes report.json, trace.jsonl, series.json and, when plot
// is not nil, the charts into dir, creating it if needed.
func (r *Report) WriteFiles(dir string, plot Plot) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := r.writeTrace(filepath.Join(dir, "trace.jsonl")); err != nil {
		return err
	}
	if err := r.writeSeries(filepath.Join(dir, "series.json")); err != nil {
		return err
	}
	if plot == nil {
		return nil
	}
	return plot(r, dir)
}

func (r *Report) writeTrace(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, res := range r.results {
		for _, rec := range res.Records {
			if err := enc.Encode(rec); err != nil {
				f.Close()
				return err
			}
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// seriesJSON is the sampled gauges of each mode, for a page to replay.
type seriesJSON struct {
	Mode             string    `json:"mode"`
	Cap              int       `json:"cap,omitempty"`
	TMS              []float64 `json:"t_ms"`
	UpstreamInflight []int     `json:"upstream_inflight"`
	Queued           []int     `json:"queued"`
	GateInflight     []int     `json:"gate_inflight"`
	Outstanding      []int     `json:"outstanding"`
	// InputBucketSize and InputBucket are the simulator's input-token
	// bucket, its size and its level at each sample, when it has one.
	InputBucketSize int       `json:"input_bucket_size,omitempty"`
	InputBucket     []float64 `json:"input_bucket,omitempty"`
}

func (r *Report) writeSeries(path string) error {
	var out []seriesJSON
	for _, res := range r.results {
		s := seriesJSON{Mode: res.Mode, Cap: res.Cap, InputBucketSize: res.InputBucketSize}
		for _, x := range res.Samples {
			if res.InputBucketSize > 0 {
				s.InputBucket = append(s.InputBucket, math.Round(x.InputBucket))
			}
			s.TMS = append(s.TMS, float64(x.T.Microseconds())/1000)
			s.UpstreamInflight = append(s.UpstreamInflight, x.UpstreamInflight)
			s.Queued = append(s.Queued, x.Queued)
			s.GateInflight = append(s.GateInflight, x.GateInflight)
			s.Outstanding = append(s.Outstanding, x.Outstanding)
		}
		out = append(out, s)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
