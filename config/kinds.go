package config

import (
	"fmt"
	"strings"
)

// Kind describes one kind of backend: its name in the config file
// (`kind = "..."`), what it can serve, and the rules its settings keep.
// A new kind is one description in kinds and its client's constructor in
// package cloud (cloud.New's table); nothing else asks for a kind by name.
type Kind struct {
	Name string
	// FirstParty says the backend speaks the Messages API itself, with
	// API keys: it serves the paths sluice relays as they are
	// (count_tokens, models, Message Batches) and the bulk endpoint's
	// batches. A cloud serves Messages only, in its own dialect, with its
	// own credentials.
	FirstParty bool
	// check lists what is wrong with a backend's table for this kind.
	check func(fb fileBackend) []string
}

// kinds are the backend kinds sluice knows, the default first.
var kinds = []Kind{
	{Name: "anthropic", FirstParty: true, check: checkAnthropic},
	{Name: "bedrock", check: checkRegional},
	{Name: "vertex", check: checkRegional},
	{Name: "foundry", check: checkFoundry},
}

// KindOf is the description of the kind named name; ok is false when
// sluice knows no such kind (its zero Kind serves nothing).
func KindOf(name string) (k Kind, ok bool) {
	for _, k := range kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// FirstParty says whether b speaks the Messages API itself (Kind's
// FirstParty).
func (b Backend) FirstParty() bool {
	k, _ := KindOf(b.Kind)
	return k.FirstParty
}

// kindNames is "anthropic, bedrock, vertex or foundry".
func kindNames() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Name
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func unknownKind(kind string) []string {
	return []string{fmt.Sprintf("unknown kind %q; want %s", kind, kindNames())}
}

func checkAnthropic(fb fileBackend) []string {
	var errs []string
	if len(fb.Keys) == 0 {
		errs = append(errs, `keys is missing: name at least one, as "env:NAME" or "file:PATH"`)
	}
	if fb.Region != "" || fb.Project != "" || fb.Resource != "" || fb.Endpoint != "" || fb.Models != nil || fb.Profile != "" || fb.Credentials != "" {
		errs = append(errs, "region, project, resource, endpoint, models, profile and credentials_file are for kind bedrock, vertex or foundry")
	}
	return errs
}

func checkFoundry(fb fileBackend) []string {
	var errs []string
	if fb.Resource == "" && fb.Endpoint == "" {
		errs = append(errs, "resource is missing: the Foundry resource's name, as in https://{resource}.services.ai.azure.com (or an endpoint)")
	}
	if fb.Resource != "" && strings.ContainsAny(fb.Resource, "/.:@?# ") {
		errs = append(errs, "resource must be the resource's name alone, as in https://{resource}.services.ai.azure.com")
	}
	if fb.Region != "" || fb.Project != "" || fb.Profile != "" || fb.Credentials != "" {
		errs = append(errs, "region, project, profile and credentials_file are for kind bedrock or vertex")
	}
	if fb.Bulk {
		errs = append(errs, "bulk is for kind anthropic: Foundry takes no Message Batches")
	}
	return errs
}

// checkRegional is Bedrock's and Vertex AI's: a region, credentials from
// the cloud's own chain.
func checkRegional(fb fileBackend) []string {
	var errs []string
	if len(fb.Keys) > 0 {
		errs = append(errs, "keys are for kind anthropic: a cloud's credentials come from its own chain (docs/clouds.md)")
	}
	if fb.Region == "" {
		errs = append(errs, "region is missing")
	}
	if fb.Resource != "" {
		errs = append(errs, "resource is for kind foundry")
	}
	if fb.Kind == "vertex" && fb.Project == "" {
		errs = append(errs, "project is missing")
	}
	if fb.Kind == "bedrock" && (fb.Project != "" || fb.Credentials != "") {
		errs = append(errs, "project and credentials_file are for kind vertex")
	}
	if fb.Kind == "vertex" && fb.Profile != "" {
		errs = append(errs, "profile is for kind bedrock")
	}
	if fb.Bulk {
		// Batches would go with its key (none) to the first-party
		// URL, or be refused by the cloud.
		errs = append(errs, "bulk is for kind anthropic: Bedrock and Vertex take no Message Batches")
	}
	return errs
}
