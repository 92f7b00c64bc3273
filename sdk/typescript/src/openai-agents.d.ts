import type { TroyClient } from "./index.js";
export declare function troyToolGuardrail(client: TroyClient, options?: { sessionId?: string; agent?: string; metadataFn?: (tool: string, input: unknown) => Record<string, unknown> | undefined }): any;
export declare class TroyTraceProcessor {
  errors: string[];
  constructor(client: TroyClient, agent: string);
  onTraceStart(trace: any): Promise<void>; onTraceEnd(trace: any): Promise<void>;
  onSpanStart(span: any): Promise<void>; onSpanEnd(span: any): Promise<void>;
  shutdown(): Promise<void>; forceFlush(): Promise<void>;
}
