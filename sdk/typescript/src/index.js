// troy's guard and live audit for JavaScript agents: a client of troy
// serve's HTTP API. check() asks the guard about one proposed action and
// fails closed when troy cannot answer (unless failOpen); trace() streams
// a run's steps into troy's live audit. No policy logic lives here.

export class TroyBlocked extends Error {
  constructor(tool, decision) {
    super(describe(tool, decision));
    this.name = "TroyBlocked";
    this.tool = tool;
    this.decision = decision;
  }
}

export function describe(tool, decision) {
  const why = (decision.violations ?? []).map((v) => `rule ${v.rule_id} (${v.severity}): ${v.description ?? ""}`);
  if (decision.reason) why.push(decision.reason);
  return `troy blocked ${tool}: ${why.join("; ") || "no reason given"}`;
}

// asInput is a tool's input as troy sees it: JSON text parsed, other text wrapped.
export function asInput(value) {
  if (typeof value === "string") {
    try {
      const parsed = JSON.parse(value);
      if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) return parsed;
    } catch {}
    return { input: value };
  }
  return value;
}

export class TroyClient {
  constructor({ url = "http://127.0.0.1:8080", token, timeoutMs = 5000, failOpen = false } = {}) {
    this.url = url.replace(/\/+$/, "");
    this.token = token;
    this.timeoutMs = timeoutMs;
    this.failOpen = failOpen;
  }

  async post(path, body) {
    const headers = { "Content-Type": "application/json" };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const res = await fetch(this.url + path, { method: "POST", headers, body: JSON.stringify(body), signal: AbortSignal.timeout(this.timeoutMs), redirect: "error" });
    const text = await res.text();
    if (!res.ok) {
      const err = new Error(`troy answered ${res.status}: ${text.trim()}`);
      err.status = res.status;
      throw err;
    }
    return text ? JSON.parse(text) : {};
  }

  // check asks the guard about one action; it resolves to the decision.
  async check(tool, input, { sessionId, agent, metadata, actionType = "tool_call", policy, description } = {}) {
    const action = { type: actionType, name: tool };
    if (input !== undefined) action.input = input;
    if (metadata) action.metadata = metadata;
    if (description) action.description = description;
    const body = { action };
    if (sessionId) body.session_id = sessionId;
    if (agent) body.agent = { name: agent };
    if (policy) body.policy = policy;
    let d;
    try {
      d = await this.post("/v1/guard/check", body);
    } catch (err) {
      if (err.status) return { decision: "block", reason: `troy refused the check: ${err.message}` }; // troy answered
      if (this.failOpen) return { decision: "allow", reason: `troy unreachable, failing open: ${err.message}` };
      return { decision: "block", reason: `troy unreachable, failing closed: ${err.message}` };
    }
    if (!d || (d.decision !== "allow" && d.decision !== "block")) {
      return { decision: "block", reason: "troy's answer is not a decision, failing closed" };
    }
    return d;
  }

  // guard is check, rejecting with TroyBlocked when the action is blocked.
  async guard(tool, input, opts) {
    const d = await this.check(tool, input, opts);
    if (d.decision !== "allow") throw new TroyBlocked(tool, d);
    return d;
  }

  trace(traceId, agent) {
    return new Trace(this, traceId, agent);
  }
}

// Trace streams a run into troy's live audit, one step at a time; a step
// troy did not take never breaks the run: it is kept in errors.
export class Trace {
  constructor(client, traceId, agent) {
    this.client = client;
    this.traceId = traceId;
    this.agent = agent;
    this.n = 0;
    this.errors = [];
  }

  async step(type, { name, input, output, metadata } = {}) {
    this.n += 1;
    const st = { step_id: String(this.n), type, timestamp: new Date().toISOString() };
    if (name !== undefined) st.name = name;
    if (input !== undefined) st.input = input;
    if (output !== undefined) st.output = output;
    if (metadata !== undefined) st.metadata = metadata;
    const path = `/v1/traces/${encodeURIComponent(this.traceId)}/steps?agent=${encodeURIComponent(this.agent)}`;
    try {
      await this.client.post(path, st);
    } catch (err) {
      this.errors.push(`step ${this.n}: ${err.message}`);
    }
  }

  // end ends the trace (its report follows); it resolves to what could not be sent.
  async end() {
    try {
      await this.client.post(`/v1/traces/${encodeURIComponent(this.traceId)}/end`, {});
    } catch (err) {
      this.errors.push(`end: ${err.message}`);
    }
    return this.errors;
  }
}
