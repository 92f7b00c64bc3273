"""CrewAI: a before-tool-call hook that asks troy about each call; a
refusal returns False, which CrewAI's hooks read as "do not run"."""

from __future__ import annotations

from typing import Any, Callable, Optional

from .. import MetadataFn, TroyClient, as_input


def before_tool_hook(client: TroyClient, *, agent: Optional[str] = None, session_id: Optional[str] = None,
                     metadata_fn: Optional[MetadataFn] = None) -> Callable[[Any], Optional[bool]]:
    """The hook function; register() registers it with CrewAI. Give the
    crew run's id as session_id for cross-step rules to see earlier calls."""

    def troy_before_tool_call(context: Any) -> Optional[bool]:
        # CrewAI runs the tool when a hook raises: any failure here refuses
        try:
            name = getattr(context, "tool_name", "tool")
            value = as_input(getattr(context, "tool_input", None))
            who = agent or getattr(getattr(context, "agent", None), "role", None)
            d = client.check(name, value, session_id=session_id, agent=who, metadata=metadata_fn(name, value) if metadata_fn else None)
            return None if d.get("decision") == "allow" else False
        except Exception:  # noqa: BLE001
            return False

    return troy_before_tool_call


def register(client: TroyClient, **kw: Any) -> Callable[[Any], Optional[bool]]:
    """Register the hook with CrewAI (crewai.hooks.before_tool_call)."""
    from crewai.hooks import before_tool_call  # type: ignore

    return before_tool_call(before_tool_hook(client, **kw))
