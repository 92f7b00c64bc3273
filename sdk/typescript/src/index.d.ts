export interface Violation { rule_id: string; step_id: string; severity: string; description?: string; weight?: number }
export interface Decision { decision: "allow" | "block"; mode?: string; violations?: Violation[]; reason?: string; policy_id?: string; policy_hash?: string; session_id?: string }
export interface CheckOptions { sessionId?: string; agent?: string; metadata?: Record<string, unknown>; actionType?: string; policy?: string; description?: string }
export interface ClientOptions { url?: string; token?: string; timeoutMs?: number; failOpen?: boolean }
export declare class TroyBlocked extends Error { tool: string; decision: Decision; constructor(tool: string, decision: Decision) }
export declare function describe(tool: string, decision: Decision): string;
export declare function asInput(value: unknown): unknown;
export declare class TroyClient {
  constructor(options?: ClientOptions);
  check(tool: string, input?: unknown, options?: CheckOptions): Promise<Decision>;
  guard(tool: string, input?: unknown, options?: CheckOptions): Promise<Decision>;
  trace(traceId: string, agent: string): Trace;
}
export interface StepFields { name?: string; input?: unknown; output?: unknown; metadata?: Record<string, unknown> }
export declare class Trace {
  traceId: string; agent: string; errors: string[];
  step(type: "llm_call" | "tool_call" | "decision" | "observation", fields?: StepFields): Promise<void>;
  end(): Promise<string[]>;
}
