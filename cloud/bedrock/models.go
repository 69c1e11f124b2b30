package bedrock

// defaultModels maps the API's model ids, dated and alias, to the ids
// Bedrock's InvokeModel takes. Sources: Anthropic's "Claude on Amazon
// Bedrock (Opus 4.6 and earlier)" page (the table of base Bedrock model
// ids and where the global cross-region profiles exist) and the Bedrock
// user guide's inference-profile ids. A model whose global profile the
// docs list maps to it (global.…): on-demand throughput on the newer
// models takes a profile, not a base id. Older models map to the base id,
// which a region serves with on-demand or provisioned throughput; a
// deployment that needs a regional profile (us., eu., apac., jp.) or an
// ARN overrides the entry in its backend's models table. Models newer than
// Opus 4.6 are served on Bedrock's Messages-API endpoint, not InvokeModel,
// and are not in this table.
var defaultModels = map[string]string{
	"claude-opus-4-6":   "global.anthropic.claude-opus-4-6-v1",
	"claude-sonnet-4-6": "global.anthropic.claude-sonnet-4-6",

	"claude-opus-4-5":          "global.anthropic.claude-opus-4-5-20251101-v1:0",
	"claude-opus-4-5-20251101": "global.anthropic.claude-opus-4-5-20251101-v1:0",

	"claude-sonnet-4-5":          "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
	"claude-sonnet-4-5-20250929": "global.anthropic.claude-sonnet-4-5-20250929-v1:0",

	"claude-haiku-4-5":          "global.anthropic.claude-haiku-4-5-20251001-v1:0",
	"claude-haiku-4-5-20251001": "global.anthropic.claude-haiku-4-5-20251001-v1:0",

	"claude-sonnet-4-0":        "global.anthropic.claude-sonnet-4-20250514-v1:0",
	"claude-sonnet-4-20250514": "global.anthropic.claude-sonnet-4-20250514-v1:0",

	"claude-opus-4-1":          "anthropic.claude-opus-4-1-20250805-v1:0",
	"claude-opus-4-1-20250805": "anthropic.claude-opus-4-1-20250805-v1:0",
	"claude-opus-4-0":          "anthropic.claude-opus-4-20250514-v1:0",
	"claude-opus-4-20250514":   "anthropic.claude-opus-4-20250514-v1:0",

	"claude-3-7-sonnet-latest":   "anthropic.claude-3-7-sonnet-20250219-v1:0",
	"claude-3-7-sonnet-20250219": "anthropic.claude-3-7-sonnet-20250219-v1:0",
	"claude-3-5-haiku-latest":    "anthropic.claude-3-5-haiku-20241022-v1:0",
	"claude-3-5-haiku-20241022":  "anthropic.claude-3-5-haiku-20241022-v1:0",
	"claude-3-haiku-20240307":    "anthropic.claude-3-haiku-20240307-v1:0",
}
