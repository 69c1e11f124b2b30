package record

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"

	"github.com/sluicehq/sluice/internal/regfile"
)

// Recording is a recording read back: its header (the latest part's) and
// its requests in arrival order.
type Recording struct {
	Header   Header
	Requests []Request
}

// Load reads the recording at path, with its rotated part path.1 before it
// when that belongs to the same recording.
func Load(path string) (*Recording, error) {
	rec, err := readFile(path)
	if err != nil {
		return nil, err
	}
	older, err := readFile(path + ".1")
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	case older.Header.ID == rec.Header.ID:
		rec.Requests = append(older.Requests, rec.Requests...)
	}
	sort.SliceStable(rec.Requests, func(i, j int) bool { return rec.Requests[i].T.Before(rec.Requests[j].T) })
	return rec, nil
}

func readFile(path string) (*Recording, error) {
	f, err := regfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("recording: %w", err)
	}
	defer f.Close()
	h, err := readHeader(f)
	if err != nil {
		return nil, fmt.Errorf("recording %s: not a sluice recording: %v", path, err)
	}
	rec := &Recording{Header: h}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for n := 1; sc.Scan(); n++ {
		if n == 1 || len(sc.Bytes()) == 0 {
			continue // the header
		}
		var r Request
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			// A line cut short by a crash mid-write ends the file.
			if !sc.Scan() {
				break
			}
			return nil, fmt.Errorf("recording %s: line %d: %w", path, n, err)
		}
		rec.Requests = append(rec.Requests, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("recording %s: %w", path, err)
	}
	return rec, nil
}
