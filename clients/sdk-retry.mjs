// sdk-retry.mjs sends one Messages request with the official TypeScript
// SDK at its defaults (two retries, its own retry policy) to
// ANTHROPIC_BASE_URL and prints one JSON line: whether it succeeded, the
// model that answered, or the error the SDK raised in the end, and how
// long it took. Run by reactions_test.go, which counts the tries.
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic();
const start = Date.now();
try {
  const msg = await client.messages.create({
    model: process.env.SLUICE_MODEL || "claude-sonnet-4-5",
    max_tokens: 16,
    messages: [{ role: "user", content: "Name a colour." }],
  });
  console.log(JSON.stringify({ ok: true, model: msg.model, ms: Date.now() - start }));
} catch (e) {
  console.log(JSON.stringify({ ok: false, status: e?.status ?? 0, type: e?.error?.error?.type ?? "",
    message: String(e?.error?.error?.message ?? e?.message ?? e), ms: Date.now() - start }));
}
