import type { TroyClient, Trace } from "./index.js";
export declare function guardTools<T extends Record<string, any>>(tools: T, client: TroyClient, options?: { sessionId?: string; agent?: string; metadataFn?: (tool: string, input: unknown) => Record<string, unknown> | undefined; trace?: Trace }): T;
export declare function troyMiddleware(trace: Trace): { wrapGenerate: (options: { doGenerate: () => Promise<any> }) => Promise<any> };
