// sdk-check.mjs drives the official TypeScript SDK against the base URL in
// ANTHROPIC_BASE_URL (sluice) and prints one JSON line per check. It exits
// non-zero at the first check that fails. Run by clients_test.go.
import Anthropic from "@anthropic-ai/sdk";

const model = process.env.SLUICE_MODEL || "claude-sonnet-4-5";
const client = new Anthropic({ maxRetries: 2, timeout: 60_000 });
const checks = [];
// SLUICE_SKIP_CHECKS names checks a backend does not offer (a cloud's:
// models, batch), comma-separated.
const skip = new Set((process.env.SLUICE_SKIP_CHECKS || "").split(","));

function check(name, ok, detail) {
  console.log(JSON.stringify({ check: name, ok, detail }));
  if (!ok) {
    process.exitCode = 1;
    throw new Error(`${name} failed: ${JSON.stringify(detail)}`);
  }
}

async function main() {
  const msg = await client.messages.create({
    model, max_tokens: 64, messages: [{ role: "user", content: "Say hello." }],
  });
  check("message", msg.type === "message" && msg.content[0]?.type === "text" && msg.usage.output_tokens > 0,
    { id: msg.id, stop: msg.stop_reason });

  const stream = client.messages.stream({
    model, max_tokens: 64, messages: [{ role: "user", content: "Count to three." }],
  });
  let deltas = 0;
  stream.on("text", () => { deltas++; });
  const final = await stream.finalMessage();
  check("stream", deltas > 0 && final.content[0]?.type === "text" && final.stop_reason !== null,
    { deltas, stop: final.stop_reason });

  const tool = await client.messages.create({
    model, max_tokens: 128,
    tools: [{ name: "get_weather", description: "Weather for a city.",
      input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }],
    tool_choice: { type: "tool", name: "get_weather" },
    messages: [{ role: "user", content: "Weather in Paris?" }],
  });
  const use = tool.content.find((b) => b.type === "tool_use");
  check("tool_use", tool.stop_reason === "tool_use" && use?.name === "get_weather" && typeof use.input === "object",
    { stop: tool.stop_reason, input: use?.input });

  const count = await client.messages.countTokens({
    model, messages: [{ role: "user", content: "How many tokens is this?" }],
  });
  check("count_tokens", count.input_tokens > 0, count);

  if (!skip.has("models")) {
    const models = [];
    for await (const m of client.models.list({ limit: 5 })) models.push(m.id);
    check("models", models.length > 0, { first: models.slice(0, 3) });
  }

  // Two non-streaming requests at once on one cached system prompt: sluice
  // sends the leader upstream as a stream and gives its client the Message
  // reassembled from the events; this SDK must parse it as it parses any
  // Message, and the follower must read the cache the leader wrote.
  const system = [{ type: "text", text: "You are a careful assistant. ".repeat(400), cache_control: { type: "ephemeral" } }];
  const pair = await Promise.all(["First?", "Second?"].map((q) => client.messages.create({
    model, max_tokens: 32, system, messages: [{ role: "user", content: q }],
  })));
  const keys = (m) => Object.keys(m).sort().join(",");
  const writes = pair.filter((m) => m.usage.cache_creation_input_tokens > 0).length;
  const reads = pair.filter((m) => m.usage.cache_read_input_tokens > 0).length;
  check("cached_pair", pair.every((m) => m.type === "message" && m.content[0]?.type === "text" && keys(m) === keys(msg)) && writes === 1 && reads === 1,
    { writes, reads, keys: pair.map(keys) });

  if (skip.has("batch")) return;
  const batch = await client.messages.batches.create({
    requests: [
      { custom_id: "a", params: { model, max_tokens: 16, messages: [{ role: "user", content: "One." }] } },
      { custom_id: "b", params: { model, max_tokens: 16, messages: [{ role: "user", content: "Two." }] } },
    ],
  });
  let b = batch;
  for (let i = 0; i < 120 && b.processing_status !== "ended"; i++) {
    await new Promise((r) => setTimeout(r, 250));
    b = await client.messages.batches.retrieve(batch.id);
  }
  const base = new URL(process.env.ANTHROPIC_BASE_URL);
  const resultsURL = b.results_url ? new URL(b.results_url) : null;
  check("batch_ended", b.processing_status === "ended" && resultsURL?.host === base.host,
    { status: b.processing_status, results_url: b.results_url });
  const results = [];
  for await (const r of await client.messages.batches.results(batch.id)) results.push([r.custom_id, r.result.type]);
  results.sort();
  check("batch_results", JSON.stringify(results) === JSON.stringify([["a", "succeeded"], ["b", "succeeded"]]), results);
}

main().catch((e) => {
  console.error(String(e?.stack || e));
  process.exitCode = 1;
});
