// The Vercel AI SDK: guardTools wraps a tool set so troy checks each call
// before its execute runs (a blocked call throws TroyBlocked, which the SDK
// reports to the model as a tool error) and streams each call; the
// middleware (wrapLanguageModel) streams the model's generations.
import { TroyBlocked, asInput } from "./index.js";

export function guardTools(tools, client, { sessionId, agent, metadataFn, trace } = {}) {
  const out = {};
  for (const [name, t] of Object.entries(tools)) {
    if (typeof t.execute !== "function") {
      out[name] = t;
      continue;
    }
    out[name] = {
      ...t,
      execute: async (input, options) => {
        const value = asInput(input);
        const d = await client.check(name, value, { sessionId: sessionId ?? trace?.traceId, agent: agent ?? trace?.agent, metadata: metadataFn?.(name, value) });
        if (d.decision !== "allow") {
          const err = new TroyBlocked(name, d);
          await trace?.step("tool_call", { name, input: value, metadata: { decision: "block", error: err.message } });
          throw err;
        }
        const result = await t.execute(input, options);
        await trace?.step("tool_call", { name, input: value, output: { output: result }, metadata: { decision: "allow" } });
        return result;
      },
    };
  }
  return out;
}

// troyMiddleware streams each generation of the wrapped model as an
// llm_call step of the trace.
export function troyMiddleware(trace) {
  return {
    wrapGenerate: async ({ doGenerate }) => {
      const result = await doGenerate();
      const text = (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");
      const calls = (result.content ?? []).filter((c) => c.type === "tool-call").map((c) => c.toolName);
      await trace.step("llm_call", { output: { text, tool_calls: calls } });
      return result;
    },
  };
}
