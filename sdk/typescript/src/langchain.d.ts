import type { BaseCallbackHandler } from "@langchain/core/callbacks/base";
import type { StructuredToolInterface } from "@langchain/core/tools";
import type { TroyClient, Trace } from "./index.js";
export interface HandlerOptions { traceId: string; agent: string; guard?: boolean; metadataFn?: (tool: string, input: unknown) => Record<string, unknown> | undefined }
export declare class TroyCallbackHandler extends BaseCallbackHandler {
  name: string; trace: Trace;
  constructor(client: TroyClient, options: HandlerOptions);
  close(): Promise<string[]>;
}
export declare function guardTool<T extends StructuredToolInterface>(tool: T, client: TroyClient, options?: { sessionId?: string; agent?: string; metadataFn?: (tool: string, input: unknown) => Record<string, unknown> | undefined }): StructuredToolInterface;
