"""LangChain: a callback handler that checks each tool call with troy
before it runs (raising TroyBlocked, which LangChain propagates because
the handler sets raise_error) and streams the run's LLM and tool steps,
and ``guarded``, a wrapper for a tool's function."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional

from .. import MetadataFn, TroyBlocked, TroyClient, as_input


def _base() -> type:
    try:
        from langchain_core.callbacks import BaseCallbackHandler  # type: ignore

        return BaseCallbackHandler
    except ImportError:  # the handler's methods are all LangChain calls
        return object


def callback_handler(client: TroyClient, trace_id: str, agent: str, *, guard: bool = True,
                     metadata_fn: Optional[MetadataFn] = None) -> Any:
    """A LangChain callback handler for one run (pass it in config={"callbacks": [...]})."""
    trace = client.trace(trace_id, agent)

    class TroyCallbackHandler(_base()):  # type: ignore[misc]
        raise_error = True  # a blocked call must stop the tool, not be logged

        def __init__(self) -> None:
            self.trace = trace
            self.pending: Dict[Any, Dict[str, Any]] = {}

        def on_tool_start(self, serialized: Dict[str, Any], input_str: str, *, run_id: Any = None, inputs: Any = None, **kwargs: Any) -> None:
            name = (serialized or {}).get("name") or kwargs.get("name") or "tool"
            value = inputs if isinstance(inputs, dict) else as_input(input_str)
            self.pending[run_id] = {"name": name, "input": value}
            if guard:
                meta = metadata_fn(name, value) if metadata_fn else None
                d = client.check(name, value, session_id=trace_id, agent=agent, metadata=meta)
                if d.get("decision") != "allow":
                    self.trace.step("tool_call", name, value, None, {"decision": "block", "error": str(TroyBlocked(name, d))})
                    self.pending.pop(run_id, None)
                    raise TroyBlocked(name, d)

        def on_tool_end(self, output: Any, *, run_id: Any = None, **kwargs: Any) -> None:
            call = self.pending.pop(run_id, {"name": kwargs.get("name", "tool"), "input": None})
            self.trace.step("tool_call", call["name"], call["input"], {"output": str(getattr(output, "content", output))}, {"decision": "allow"})

        def on_tool_error(self, error: BaseException, *, run_id: Any = None, **kwargs: Any) -> None:
            call = self.pending.pop(run_id, None)
            if call:
                self.trace.step("tool_call", call["name"], call["input"], None, {"error": str(error)})

        def on_llm_end(self, response: Any, **kwargs: Any) -> None:
            text = None
            gens = getattr(response, "generations", None)
            if gens and gens[0]:
                text = getattr(gens[0][0], "text", None)
            self.trace.step("llm_call", None, None, {"content": text} if text is not None else None)

        def on_chain_end(self, outputs: Any, *, parent_run_id: Any = None, **kwargs: Any) -> None:
            if parent_run_id is None:  # the run's outermost chain: its answer
                self.trace.step("decision", "final_answer", None, outputs if isinstance(outputs, dict) else {"output": str(outputs)})

        def close(self) -> list:
            """End the trace (its report follows); returns what could not be streamed."""
            return self.trace.end()

    return TroyCallbackHandler()


def guarded(func: Callable[..., Any], client: TroyClient, *, name: Optional[str] = None, session_id: Optional[str] = None,
            agent: Optional[str] = None, metadata_fn: Optional[MetadataFn] = None) -> Callable[..., Any]:
    """Wrap a tool's function so troy checks each call first (raising
    TroyBlocked); decorate the result with LangChain's @tool as before."""
    tool = name or func.__name__

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value: Any = kwargs if kwargs else (as_input(args[0]) if len(args) == 1 else list(args))
        client.guard(tool, value, session_id=session_id, agent=agent, metadata=metadata_fn(tool, value) if metadata_fn else None)
        return func(*args, **kwargs)

    return wrapper
