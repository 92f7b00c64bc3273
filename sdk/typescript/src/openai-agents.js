// The OpenAI Agents SDK: a tool input guardrail that asks troy about each
// function tool call (a refusal is rejectContent, which the model reads;
// the tool does not run), and a trace processor that streams each trace's
// function and generation spans into troy's live audit.
import { defineToolInputGuardrail, ToolGuardrailFunctionOutputFactory } from "@openai/agents";
import { asInput, describe } from "./index.js";

export function troyToolGuardrail(client, { sessionId, agent, metadataFn } = {}) {
  return defineToolInputGuardrail({
    name: "troy",
    run: async ({ agent: who, toolCall }) => {
      const name = toolCall.name;
      const value = asInput(toolCall.arguments);
      // one session per conversation, so cross-step rules see earlier calls
      const session = sessionId ?? toolCall.providerData?.traceId ?? who?.name;
      const d = await client.check(name, value, { sessionId: session, agent: agent ?? who?.name, metadata: metadataFn?.(name, value) });
      if (d.decision === "allow") return ToolGuardrailFunctionOutputFactory.allow(d);
      return ToolGuardrailFunctionOutputFactory.rejectContent(describe(name, d), d);
    },
  });
}

export class TroyTraceProcessor {
  constructor(client, agent) {
    this.client = client;
    this.agent = agent;
    this.traces = new Map();
    this.errors = [];
  }
  async onTraceStart(trace) {
    this.traces.set(trace.traceId, this.client.trace(trace.traceId, this.agent));
  }
  async onTraceEnd(trace) {
    const t = this.traces.get(trace.traceId);
    this.traces.delete(trace.traceId);
    if (t) this.errors.push(...(await t.end()));
  }
  async onSpanStart() {}
  async onSpanEnd(span) {
    const t = this.traces.get(span.traceId);
    const data = span.spanData;
    if (!t || !data) return;
    if (data.type === "function") {
      await t.step("tool_call", { name: data.name, input: asInput(data.input), output: { output: data.output }, metadata: span.error ? { error: span.error.message } : undefined });
    } else if (data.type === "generation" || data.type === "response") {
      await t.step("llm_call", { name: data.model, output: data.type === "response" ? { response_id: data.response_id } : { output: data.output } });
    }
  }
  async shutdown() {
    for (const [id, t] of this.traces) {
      this.traces.delete(id);
      this.errors.push(...(await t.end()));
    }
  }
  async forceFlush() {}
}
