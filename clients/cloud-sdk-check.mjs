// cloud-sdk-check.mjs drives one of the official TypeScript SDK's cloud
// packages (SLUICE_CLOUD: bedrock, vertex or foundry) against the base URL
// in SLUICE_CLOUD_BASE_URL and prints one JSON line per check, as
// sdk-check.mjs does. It exits non-zero at the first check that fails.
// Run by cloud_test.go; the credentials are the simulator's test ones.
import { AnthropicBedrock } from "@anthropic-ai/bedrock-sdk";
import { AnthropicVertex } from "@anthropic-ai/vertex-sdk";
import { AnthropicFoundry } from "@anthropic-ai/foundry-sdk";
import { OAuth2Client } from "google-auth-library";

const cloud = process.env.SLUICE_CLOUD;
const baseURL = process.env.SLUICE_CLOUD_BASE_URL;
const model = process.env.SLUICE_MODEL;
const common = { baseURL, maxRetries: 0, timeout: 60_000 };

function client() {
  switch (cloud) {
    case "bedrock":
      return new AnthropicBedrock({ ...common, awsRegion: "us-east-1",
        awsAccessKey: process.env.SLUICE_AWS_ACCESS_KEY_ID, awsSecretKey: process.env.SLUICE_AWS_SECRET_ACCESS_KEY });
    case "vertex": {
      // Google's own OAuth2 client holding a token, as Application Default
      // Credentials would after a fetch: no network beyond the base URL.
      const auth = new OAuth2Client();
      auth.setCredentials({ access_token: process.env.SLUICE_VERTEX_TOKEN, expiry_date: Date.now() + 3_600_000 });
      return new AnthropicVertex({ ...common, region: "us-east5", projectId: "sim-project", authClient: auth });
    }
    case "foundry":
      if (process.env.SLUICE_FOUNDRY_TOKEN) {
        return new AnthropicFoundry({ ...common, azureADTokenProvider: async () => process.env.SLUICE_FOUNDRY_TOKEN });
      }
      return new AnthropicFoundry({ ...common, apiKey: process.env.SLUICE_FOUNDRY_API_KEY });
  }
  throw new Error(`SLUICE_CLOUD=${cloud}: want bedrock, vertex or foundry`);
}

function check(name, ok, detail) {
  console.log(JSON.stringify({ check: name, ok, detail }));
  if (!ok) {
    process.exitCode = 1;
    throw new Error(`${name} failed: ${JSON.stringify(detail)}`);
  }
}

async function main() {
  const c = client();
  const msg = await c.messages.create({
    model, max_tokens: 64, messages: [{ role: "user", content: "Say hello." }],
  });
  check("message", msg.type === "message" && msg.content[0]?.type === "text" && msg.usage.output_tokens > 0,
    { id: msg.id, model: msg.model, stop: msg.stop_reason });

  const stream = c.messages.stream({
    model, max_tokens: 64, messages: [{ role: "user", content: "Count to three." }],
  });
  let deltas = 0;
  stream.on("text", () => { deltas++; });
  const final = await stream.finalMessage();
  check("stream", deltas > 0 && final.content[0]?.type === "text" && final.stop_reason !== null,
    { deltas, stop: final.stop_reason });

  // AnthropicBedrock offers no countTokens: the package deletes it (from
  // the instance only; the prototype's would call the first-party path).
  if (cloud !== "bedrock") {
    const count = await c.messages.countTokens({
      model, messages: [{ role: "user", content: "How many tokens is this?" }],
    });
    check("count_tokens", count.input_tokens > 0, count);
  }
}

main().catch((e) => {
  console.error(String(e?.stack || e));
  process.exitCode = 1;
});
