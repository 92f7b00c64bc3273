// LangChain.js: a callback handler that checks each tool call with troy
// before it runs (it throws TroyBlocked; raiseError and awaitHandlers make
// LangChain wait for it and stop the tool) and streams the run's LLM and
// tool steps, and guardTool, a wrapper for a tool.
import { BaseCallbackHandler } from "@langchain/core/callbacks/base";
import { DynamicStructuredTool } from "@langchain/core/tools";
import { TroyBlocked, asInput } from "./index.js";

export class TroyCallbackHandler extends BaseCallbackHandler {
  name = "troy";
  raiseError = true;
  awaitHandlers = true;

  constructor(client, { traceId, agent, guard = true, metadataFn } = {}) {
    super();
    this.client = client;
    this.agent = agent;
    this.traceId = traceId;
    this.guardCalls = guard;
    this.metadataFn = metadataFn;
    this.trace = client.trace(traceId, agent);
    this.pending = new Map();
  }

  async handleToolStart(tool, input, runId, parentRunId, tags, metadata, runName) {
    const name = runName ?? tool?.name ?? (Array.isArray(tool?.id) ? tool.id.at(-1) : "tool");
    const value = asInput(input);
    this.pending.set(runId, { name, input: value });
    if (!this.guardCalls) return;
    const d = await this.client.check(name, value, { sessionId: this.traceId, agent: this.agent, metadata: this.metadataFn?.(name, value) });
    if (d.decision !== "allow") {
      const err = new TroyBlocked(name, d);
      this.pending.delete(runId);
      await this.trace.step("tool_call", { name, input: value, metadata: { decision: "block", error: err.message } });
      throw err;
    }
  }

  async handleToolEnd(output, runId) {
    const call = this.pending.get(runId) ?? { name: "tool" };
    this.pending.delete(runId);
    const text = typeof output === "string" ? output : (output?.content ?? JSON.stringify(output));
    await this.trace.step("tool_call", { name: call.name, input: call.input, output: { output: text }, metadata: { decision: "allow" } });
  }

  async handleToolError(err, runId) {
    const call = this.pending.get(runId);
    this.pending.delete(runId);
    if (call) await this.trace.step("tool_call", { name: call.name, input: call.input, metadata: { error: String(err?.message ?? err) } });
  }

  async handleLLMEnd(output) {
    const text = output?.generations?.[0]?.[0]?.text;
    await this.trace.step("llm_call", { output: text !== undefined ? { content: text } : undefined });
  }

  // close ends the trace (its report follows); it resolves to what could not be streamed.
  close() {
    return this.trace.end();
  }
}

// guardTool wraps a LangChain tool so troy checks each call before it
// runs; a blocked call rejects with TroyBlocked.
export function guardTool(tool, client, { sessionId, agent, metadataFn } = {}) {
  return new DynamicStructuredTool({
    name: tool.name,
    description: tool.description,
    schema: tool.schema,
    func: async (input, runManager, config) => {
      await client.guard(tool.name, asInput(input), { sessionId, agent, metadata: metadataFn?.(tool.name, input) });
      return tool.invoke(input, config);
    },
  });
}
