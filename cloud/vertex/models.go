package vertex

// defaultModels maps the API's model ids, dated and alias, to Vertex AI's
// model names (publishers/anthropic/models/{name}). Sources: Google
// Cloud's "Request predictions with Claude models" page and Anthropic's
// "Claude on Vertex AI" page, which give each model's name with its @date
// suffix. Opus 4.6 and Sonnet 4.6 are published without a date suffix, as
// on Bedrock. A project that serves a model under another name overrides
// the entry in its backend's models table.
var defaultModels = map[string]string{
	"claude-opus-4-6":   "claude-opus-4-6",
	"claude-sonnet-4-6": "claude-sonnet-4-6",

	"claude-opus-4-5":          "claude-opus-4-5@20251101",
	"claude-opus-4-5-20251101": "claude-opus-4-5@20251101",

	"claude-sonnet-4-5":          "claude-sonnet-4-5@20250929",
	"claude-sonnet-4-5-20250929": "claude-sonnet-4-5@20250929",

	"claude-haiku-4-5":          "claude-haiku-4-5@20251001",
	"claude-haiku-4-5-20251001": "claude-haiku-4-5@20251001",

	"claude-opus-4-1":          "claude-opus-4-1@20250805",
	"claude-opus-4-1-20250805": "claude-opus-4-1@20250805",
	"claude-opus-4-0":          "claude-opus-4@20250514",
	"claude-opus-4-20250514":   "claude-opus-4@20250514",
	"claude-sonnet-4-0":        "claude-sonnet-4@20250514",
	"claude-sonnet-4-20250514": "claude-sonnet-4@20250514",

	"claude-3-7-sonnet-latest":   "claude-3-7-sonnet@20250219",
	"claude-3-7-sonnet-20250219": "claude-3-7-sonnet@20250219",
	"claude-3-5-haiku-latest":    "claude-3-5-haiku@20241022",
	"claude-3-5-haiku-20241022":  "claude-3-5-haiku@20241022",
	"claude-3-haiku-20240307":    "claude-3-haiku@20240307",
}
