"""The OpenAI Agents SDK: a tool input guardrail that asks troy about each
function tool call (a refusal becomes reject_content, which the model
reads), and a tracing processor that streams each trace's generation and
function spans into troy's live audit."""

from __future__ import annotations

from typing import Any, Dict, Optional

from .. import MetadataFn, TroyClient, as_input, describe


def tool_input_guardrail(client: TroyClient, *, agent: Optional[str] = None, session_id: Optional[str] = None,
                         metadata_fn: Optional[MetadataFn] = None) -> Any:
    """A guardrail for FunctionTool(tool_input_guardrails=[...])."""
    from agents import ToolGuardrailFunctionOutput, tool_input_guardrail as decorate  # type: ignore

    def troy_guard(data: Any) -> Any:
        ctx = data.context
        name = getattr(ctx, "tool_name", "tool")
        value = as_input(getattr(ctx, "tool_arguments", None))
        d = client.check(name, value, session_id=session_id or _current_trace_id(), agent=agent,
                         metadata=metadata_fn(name, value) if metadata_fn else None)
        if d.get("decision") == "allow":
            return ToolGuardrailFunctionOutput.allow(output_info=d)
        return ToolGuardrailFunctionOutput.reject_content(message=describe(name, d), output_info=d)

    return decorate(troy_guard)


def _current_trace_id() -> Optional[str]:
    """The run's trace id, so a run's calls share a session (cross-step
    rules see the earlier ones)."""
    try:
        from agents.tracing import get_current_trace  # type: ignore

        t = get_current_trace()
        return getattr(t, "trace_id", None)
    except Exception:  # noqa: BLE001 - no tracing: one call, one session
        return None


class TraceProcessor:
    """A TracingProcessor (add_trace_processor(TraceProcessor(client, agent)))."""

    def __init__(self, client: TroyClient, agent: str):
        self.client = client
        self.agent = agent
        self.traces: Dict[str, Any] = {}
        self.errors: list = []

    def on_trace_start(self, trace: Any) -> None:
        self.traces[trace.trace_id] = self.client.trace(trace.trace_id, self.agent)

    def on_trace_end(self, trace: Any) -> None:
        t = self.traces.pop(trace.trace_id, None)
        if t is not None:
            self.errors.extend(t.end())

    def on_span_start(self, span: Any) -> None:
        pass

    def on_span_end(self, span: Any) -> None:
        t = self.traces.get(getattr(span, "trace_id", None))
        data = getattr(span, "span_data", None)
        if t is None or data is None:
            return
        kind = getattr(data, "type", "") or type(data).__name__
        if kind in ("function", "FunctionSpanData"):
            t.step("tool_call", getattr(data, "name", None), as_input(getattr(data, "input", None)), {"output": getattr(data, "output", None)})
        elif kind in ("response", "ResponseSpanData"):
            resp = getattr(data, "response", None)
            t.step("llm_call", getattr(resp, "model", None), None, {"response_id": getattr(resp, "id", None)})
        elif kind in ("generation", "GenerationSpanData"):
            t.step("llm_call", getattr(data, "model", None), {"messages": getattr(data, "input", None)}, {"messages": getattr(data, "output", None)})

    def shutdown(self) -> None:
        for trace_id in list(self.traces):
            self.errors.extend(self.traces.pop(trace_id).end())

    def force_flush(self) -> None:
        pass
