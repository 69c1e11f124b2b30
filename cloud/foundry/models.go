package foundry

// defaultModels maps the API's model ids, dated and alias, to Foundry
// deployment names. On Foundry the request's model is the name of a
// deployment the resource's owner made, which the portal proposes as the
// model's own id (claude-sonnet-4-5); Sources: Anthropic's "Claude in
// Microsoft Foundry" page (the deployment name is what the model
// parameter takes) and Microsoft Learn's "Deploy and use Claude models in
// Microsoft Foundry" (the models offered). A resource whose deployments
// have other names maps them in its backend's models table.
var defaultModels = map[string]string{
	"claude-opus-4-6":   "claude-opus-4-6",
	"claude-sonnet-4-6": "claude-sonnet-4-6",

	"claude-opus-4-5":          "claude-opus-4-5",
	"claude-opus-4-5-20251101": "claude-opus-4-5",

	"claude-sonnet-4-5":          "claude-sonnet-4-5",
	"claude-sonnet-4-5-20250929": "claude-sonnet-4-5",

	"claude-haiku-4-5":          "claude-haiku-4-5",
	"claude-haiku-4-5-20251001": "claude-haiku-4-5",

	"claude-opus-4-1":          "claude-opus-4-1",
	"claude-opus-4-1-20250805": "claude-opus-4-1",
}
