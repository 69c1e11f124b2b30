package oidcauth

import (
	"errors"
	"slices"
	"sort"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
)

// Group is what the members of one identity-provider group may do: the
// members of a sluice key (INBOUND_KEYS_FILE's entries), less its name
// and hash, which the token gives.
type Group struct {
	Name          string     // the group as the groups claim spells it; "*" is every token
	Models        []string   // models its members may call; nil: all
	Backends      []string   // backends their requests may go to; nil: all
	Class         gate.Class // their priority class
	Weight        float64    // their share in the fair order; 0 means 1
	MaxConcurrent int        // upstream calls at once for each member; 0: no limit
	MaxWaiting    int        // requests waiting for each member; 0: no limit
}

func (g *Group) check() error {
	switch {
	case g.Name == "":
		return errors.New("no group name")
	case g.Weight < 0 || g.MaxConcurrent < 0 || g.MaxWaiting < 0:
		return errors.New("weight, max_concurrent and max_waiting must not be negative")
	}
	return nil
}

// merge gives rec the most generous of the groups its holder is in: the
// union of their models and backends (all, if one allows all), the most
// urgent class, the largest weight and limits (none, if one has none).
// A person in two groups gets what either would give, never less.
func merge(rec *request.Inbound, groups []*Group) {
	first := groups[0]
	rec.Models, rec.Backends = slices.Clone(first.Models), slices.Clone(first.Backends)
	rec.Class, rec.Weight, rec.MaxConcurrent, rec.MaxWaiting = first.Class, first.Weight, first.MaxConcurrent, first.MaxWaiting
	for _, g := range groups[1:] {
		rec.Models = union(rec.Models, g.Models)
		rec.Backends = union(rec.Backends, g.Backends)
		rec.Class = min(rec.Class, g.Class) // the zero value, interactive, is the most urgent
		rec.Weight = max(rec.Weight, g.Weight)
		rec.MaxConcurrent = looser(rec.MaxConcurrent, g.MaxConcurrent)
		rec.MaxWaiting = looser(rec.MaxWaiting, g.MaxWaiting)
	}
}

// union of two allow-lists where nil allows all.
func union(a, b []string) []string {
	if a == nil || b == nil {
		return nil
	}
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

// looser of two limits where 0 is none.
func looser(a, b int) int {
	if a == 0 || b == 0 {
		return 0
	}
	return max(a, b)
}

// groupNames are the groups mapped, for a refusal's message.
func (v *Verifier) groupNames() []string {
	names := make([]string, 0, len(v.groups))
	for n := range v.groups {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
