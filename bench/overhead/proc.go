package overhead

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// userHZ is the unit of the times in /proc/<pid>/stat: USER_HZ, 100 on
// every Linux architecture Go runs on.
const userHZ = 100

// sampleCPU is the CPU seconds (user + system, all threads) each process
// of pids has used so far; -1 for one that cannot be read.
func sampleCPU(pids []int) []float64 {
	out := make([]float64, len(pids))
	for i, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			out[i] = -1
			continue
		}
		s, err := parseStatCPU(b)
		if err != nil {
			out[i] = -1
			continue
		}
		out[i] = s
	}
	return out
}

// parseStatCPU reads utime and stime (fields 14 and 15) from the text of
// /proc/<pid>/stat, in seconds. The command name (field 2) is in
// parentheses and may hold spaces and parentheses itself, so the fields
// are counted from its last ')'.
func parseStatCPU(b []byte) (float64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", b)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("too few fields in %q", b)
	}
	u, err := strconv.ParseUint(string(f[11]), 10, 64)
	if err != nil {
		return 0, err
	}
	s, err := strconv.ParseUint(string(f[12]), 10, 64)
	if err != nil {
		return 0, err
	}
	return float64(u+s) / userHZ, nil
}

// rssKB is a process's resident set (VmRSS) in KB; 0 if it cannot be
// read.
func rssKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := bytes.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(string(f[0]), 10, 64)
				return n
			}
		}
	}
	return 0
}
