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

// constructors are each cloud kind's client, by config.Kind name: a new
// kind is its package and one line here (and its description in config).
var constructors = map[string]func(context.Context, config.Backend) (upstream.Backend, error){
	bedrock.Kind: func(ctx context.Context, b config.Backend) (upstream.Backend, error) {
		return bedrock.New(ctx, bedrock.Options{Name: b.Name, Region: b.Region, Endpoint: b.Endpoint, Models: b.Models, Profile: b.Profile})
	},
	vertex.Kind: func(ctx context.Context, b config.Backend) (upstream.Backend, error) {
		return vertex.New(ctx, vertex.Options{Name: b.Name, Project: b.Project, Region: b.Region, Endpoint: b.Endpoint, Models: b.Models,
			CredentialsFile: b.CredentialsFile})
	},
	foundry.Kind: func(ctx context.Context, b config.Backend) (upstream.Backend, error) {
		return foundry.New(ctx, foundry.Options{Name: b.Name, Resource: b.Resource, Endpoint: b.Endpoint, Models: b.Models, UseKeys: len(b.Keys) > 0})
	},
}

// New is the client of b, a backend of kind bedrock, vertex or foundry,
// with its credentials from its cloud's default chain (or the profile or
// credentials file it names; a foundry backend's keys, when it has any).
func New(b config.Backend) (upstream.Backend, error) {
	if c, ok := constructors[b.Kind]; ok {
		return c(context.Background(), b)
	}
	return nil, fmt.Errorf("no cloud of kind %q", b.Kind)
}
