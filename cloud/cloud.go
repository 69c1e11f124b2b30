// Package cloud builds the client of a config file's backend of kind
// bedrock, vertex or foundry (packages cloud/bedrock, cloud/vertex and
// cloud/foundry; see
// docs/clouds.md). Only a configuration that declares one calls it: a
// first-party request never passes through the clouds' libraries.
package cloud

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/cloud/bedrock"
	"github.com/sluicehq/sluice/cloud/foundry"
	"github.com/sluicehq/sluice/cloud/vertex"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/upstream"
)

// New is the client of b, a backend of kind bedrock, vertex or foundry,
// with its credentials from its cloud's default chain (or the profile or
// credentials file it names; a foundry backend's keys, when it has any).
func New(b config.Backend) (upstream.Backend, error) {
	ctx := context.Background()
	switch b.Kind {
	case bedrock.Kind:
		return bedrock.New(ctx, bedrock.Options{Name: b.Name, Region: b.Region, Endpoint: b.Endpoint, Models: b.Models, Profile: b.Profile})
	case vertex.Kind:
		return vertex.New(ctx, vertex.Options{Name: b.Name, Project: b.Project, Region: b.Region, Endpoint: b.Endpoint, Models: b.Models,
			CredentialsFile: b.CredentialsFile})
	case foundry.Kind:
		return foundry.New(ctx, foundry.Options{Name: b.Name, Resource: b.Resource, Endpoint: b.Endpoint, Models: b.Models, UseKeys: len(b.Keys) > 0})
	}
	return nil, fmt.Errorf("no cloud of kind %q", b.Kind)
}
