// @troy-audit/guard against a real troy serve (TROY_BIN, or built with go),
// with the real @langchain/core from npm.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, readFileSync, rmSync, existsSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { tool } from "@langchain/core/tools";
import { z } from "zod";
import { TroyClient, TroyBlocked } from "../src/index.js";
import { TroyCallbackHandler, guardTool } from "../src/langchain.js";

const here = dirname(fileURLToPath(import.meta.url));
const POLICY = `policy_id: ts
rules:
  - rule_id: network-after-secret
    description: a network call after a secret was read
    severity: critical
    condition: step.name == 'http_post' and any_prev({ .name == 'read_secret' })
  - rule_id: no-rm-rf
    description: a shell command deletes recursively
    severity: high
    condition: step.name == 'shell' and matches(text(step.input), 'rm -rf')
`;

let work, proc, url;

before(async () => {
  work = mkdtempSync(join(tmpdir(), "troy-ts-"));
  let bin = process.env.TROY_BIN ? resolve(process.env.TROY_BIN) : join(work, "troy");
  if (!process.env.TROY_BIN) execFileSync("go", ["build", "-o", bin, "./cmd/troy"], { cwd: resolve(here, "../../..") });
  writeFileSync(join(work, "p.yaml"), POLICY);
  proc = spawn(bin, ["serve", "--nats-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--policy", "p.yaml", "--data-dir", "data",
    "--reports-dir", "reports", "--stream-idle", "1h"], { cwd: work, stdio: ["ignore", "pipe", "ignore"] });
  const lines = createInterface({ input: proc.stdout });
  url = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error("troy serve printed no HTTP address")), 60000);
    lines.on("line", (l) => {
      const f = l.trim().split(/\s+/);
      if (f[0] === "http:") { clearTimeout(timer); ok(f[1]); }
    });
  });
});

after(() => {
  proc?.kill();
  rmSync(work, { recursive: true, force: true });
});

async function report(traceId, want) {
  const root = join(work, "reports");
  for (let i = 0; i < 150; i++) {
    for (const run of existsSync(root) ? readdirSync(root) : []) {
      const f = join(root, run, traceId, "report.md");
      if (existsSync(f) && readFileSync(f, "utf8").includes(want)) return readFileSync(f, "utf8");
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.fail(`no report of ${traceId} with ${want}`);
}

test("the client: allow, block, fail closed", async () => {
  const troy = new TroyClient({ url });
  assert.equal((await troy.check("shell", { cmd: "ls" })).decision, "allow");
  const d = await troy.check("shell", { cmd: "rm -rf /" });
  assert.equal(d.decision, "block");
  assert.equal(d.violations[0].rule_id, "no-rm-rf");
  await assert.rejects(troy.guard("shell", { cmd: "rm -rf /" }), (e) => e instanceof TroyBlocked && /rule no-rm-rf \(high\)/.test(e.message));
  const dead = new TroyClient({ url: "http://127.0.0.1:9", timeoutMs: 1000 });
  assert.equal((await dead.check("shell")).decision, "block", "unreachable: fails closed");
  assert.equal((await new TroyClient({ url: "http://127.0.0.1:9", timeoutMs: 1000, failOpen: true }).check("shell")).decision, "allow");
});

test("LangChain.js: the handler stops a blocked tool and streams the run", async () => {
  const troy = new TroyClient({ url });
  const traceId = `ts-lc-${Date.now()}`;
  const ran = [];
  const readSecret = tool(async () => { ran.push("read_secret"); return "sk-..."; }, { name: "read_secret", description: "read the vault", schema: z.object({}) });
  const httpPost = tool(async ({ url: u }) => { ran.push("http_post"); return "200"; }, { name: "http_post", description: "post", schema: z.object({ url: z.string() }) });
  const h = new TroyCallbackHandler(troy, { traceId, agent: "ts-agent", metadataFn: () => ({ tenant: "acme" }) });
  assert.equal(await readSecret.invoke({}, { callbacks: [h] }), "sk-...");
  await assert.rejects(httpPost.invoke({ url: "https://evil" }, { callbacks: [h] }), (e) => e instanceof TroyBlocked);
  assert.deepEqual(ran, ["read_secret"], "the blocked tool never ran");
  assert.deepEqual(await h.close(), []);
  assert.match(await report(traceId, "network-after-secret"), /network-after-secret/);
});

test("LangChain.js: guardTool", async () => {
  const troy = new TroyClient({ url });
  const ran = [];
  const shell = tool(async ({ cmd }) => { ran.push(cmd); return "ok"; }, { name: "shell", description: "run a command", schema: z.object({ cmd: z.string() }) });
  const guarded = guardTool(shell, troy, { sessionId: `ts-g-${Date.now()}`, agent: "ts" });
  assert.equal(guarded.name, "shell");
  assert.equal(await guarded.invoke({ cmd: "ls" }), "ok");
  await assert.rejects(guarded.invoke({ cmd: "rm -rf /" }), (e) => e instanceof TroyBlocked);
  assert.deepEqual(ran, ["ls"]);
});

test("Vercel AI SDK: guarded tools and the middleware, with the SDK's mock model", async () => {
  const { generateText, tool: aiTool, wrapLanguageModel, stepCountIs } = await import("ai");
  const { MockLanguageModelV2 } = await import("ai/test");
  const { guardTools, troyMiddleware } = await import("../src/ai.js");
  const troy = new TroyClient({ url });
  const traceId = `ts-ai-${Date.now()}`;
  const trace = troy.trace(traceId, "ai-agent");
  const ran = [];
  const turns = [
    [{ type: "tool-call", toolCallId: "1", toolName: "read_secret", input: "{}" }],
    [{ type: "tool-call", toolCallId: "2", toolName: "http_post", input: JSON.stringify({ url: "https://evil" }) }],
    [{ type: "text", text: "done" }],
  ];
  let turn = 0;
  const model = new MockLanguageModelV2({
    doGenerate: async () => {
      const content = turns[Math.min(turn++, turns.length - 1)];
      return { content, finishReason: content[0].type === "text" ? "stop" : "tool-calls", usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 }, warnings: [] };
    },
  });
  const tools = guardTools({
    read_secret: aiTool({ description: "read the vault", inputSchema: z.object({}), execute: async () => { ran.push("read_secret"); return "sk-..."; } }),
    http_post: aiTool({ description: "post", inputSchema: z.object({ url: z.string() }), execute: async () => { ran.push("http_post"); return "200"; } }),
  }, troy, { trace });
  const res = await generateText({ model: wrapLanguageModel({ model, middleware: troyMiddleware(trace) }), tools, prompt: "go", stopWhen: stepCountIs(5) });
  assert.deepEqual(ran, ["read_secret"], "the blocked call never ran");
  const errors = res.steps.flatMap((s) => s.content).filter((c) => c.type === "tool-error");
  assert.equal(errors.length, 1);
  assert.match(String(errors[0].error?.message ?? errors[0].error), /troy blocked http_post/, "the model reads troy's refusal");
  assert.deepEqual(await trace.end(), []);
  assert.match(await report(traceId, "network-after-secret"), /network-after-secret/);
});

test("OpenAI Agents SDK: the tool guardrail and the trace processor, with a fake model", async () => {
  const { Agent, Runner, Usage, tool: agentTool, addTraceProcessor, getGlobalTraceProvider } = await import("@openai/agents");
  const { troyToolGuardrail, TroyTraceProcessor } = await import("../src/openai-agents.js");
  const troy = new TroyClient({ url });
  const ran = [];
  const guard = troyToolGuardrail(troy, { sessionId: `ts-oa-${Date.now()}`, agent: "oa-agent" });
  const readSecret = agentTool({ name: "read_secret", description: "read the vault", parameters: z.object({}), inputGuardrails: [guard], execute: async () => { ran.push("read_secret"); return "sk-..."; } });
  const httpPost = agentTool({ name: "http_post", description: "post", parameters: z.object({ url: z.string() }), inputGuardrails: [guard], execute: async () => { ran.push("http_post"); return "200"; } });
  const turns = [
    [{ type: "function_call", callId: "c1", name: "read_secret", arguments: "{}", status: "completed" }],
    [{ type: "function_call", callId: "c2", name: "http_post", arguments: JSON.stringify({ url: "https://evil" }), status: "completed" }],
    [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }],
  ];
  const seen = [];
  let turn = 0;
  const model = {
    async getResponse(req) {
      seen.push(req.input);
      return { output: turns[Math.min(turn++, turns.length - 1)], usage: new Usage({ requests: 1, inputTokens: 1, outputTokens: 1, totalTokens: 2 }), responseId: `r${turn}` };
    },
    async *getStreamedResponse() { throw new Error("not streamed"); },
  };
  const processor = new TroyTraceProcessor(troy, "oa-agent");
  const traceIds = [];
  const start = processor.onTraceStart.bind(processor);
  processor.onTraceStart = async (t) => { traceIds.push(t.traceId); return start(t); };
  addTraceProcessor(processor);
  const agent = new Agent({ name: "oa-agent", instructions: "help", model, tools: [readSecret, httpPost] });
  const result = await new Runner({ tracingDisabled: false }).run(agent, "go");
  assert.equal(result.finalOutput, "done");
  assert.deepEqual(ran, ["read_secret"], "the refused call never ran");
  const lastInput = JSON.stringify(seen.at(-1));
  assert.match(lastInput, /troy blocked http_post: rule network-after-secret/, "the model read troy's refusal");
  await getGlobalTraceProvider().forceFlush?.();
  await processor.shutdown();
  assert.deepEqual(processor.errors, []);
  assert.equal(traceIds.length, 1, "the run's trace, streamed");
  assert.match(await report(traceIds[0], "read_secret"), /read_secret/, "its report, with its function spans");
});
