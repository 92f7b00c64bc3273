"""troy's guard and live audit for Python agents.

The client speaks troy serve's HTTP API with the standard library only:
``check`` asks the guard about one proposed action (and fails closed when
troy cannot be reached, unless ``fail_open``), ``Trace`` streams a run's
steps into troy's live audit. The adapters (``troy_guard.adapters``) plug
both into LangChain, the OpenAI Agents SDK and CrewAI, importing each
framework only when used. No policy logic lives here: troy decides.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Optional

__all__ = ["TroyClient", "TroyBlocked", "Trace"]

ALLOW = "allow"
BLOCK = "block"


class TroyBlocked(Exception):
    """A proposed action troy's guard refused; ``decision`` says why."""

    def __init__(self, tool: str, decision: Dict[str, Any]):
        self.tool = tool
        self.decision = decision
        super().__init__(describe(tool, decision))


def describe(tool: str, decision: Dict[str, Any]) -> str:
    why = [f"rule {v.get('rule_id')} ({v.get('severity')}): {v.get('description', '')}" for v in decision.get("violations") or []]
    if decision.get("reason"):
        why.append(decision["reason"])
    return f"troy blocked {tool}: " + "; ".join(why or ["no reason given"])


class TroyClient:
    """A client of troy serve's HTTP API.

    url: troy serve's HTTP address. token: a bearer token (scopes guard and
    ingest) when the API takes tokens. fail_open: allow when troy cannot be
    reached (the default blocks). A token the server refuses always blocks.
    """

    def __init__(self, url: str = "http://127.0.0.1:8080", token: Optional[str] = None, timeout: float = 5.0, fail_open: bool = False):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.fail_open = fail_open

    def _post(self, path: str, body: Any) -> Dict[str, Any]:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            data = resp.read()
            return json.loads(data) if data else {}

    def check(self, tool: str, input: Any = None, *, session_id: Optional[str] = None, agent: Optional[str] = None,
              metadata: Optional[Dict[str, Any]] = None, action_type: str = "tool_call", policy: Optional[str] = None,
              description: Optional[str] = None) -> Dict[str, Any]:
        """Ask the guard about one action; returns its decision."""
        action: Dict[str, Any] = {"type": action_type, "name": tool}
        if input is not None:
            action["input"] = input
        if metadata:
            action["metadata"] = metadata
        if description:
            action["description"] = description
        body: Dict[str, Any] = {"action": action}
        if session_id:
            body["session_id"] = session_id
        if agent:
            body["agent"] = {"name": agent}
        if policy:
            body["policy"] = policy
        try:
            d = self._post("/v1/guard/check", body)
        except urllib.error.HTTPError as err:  # troy answered: a refused token or a bad request blocks
            detail = err.read().decode(errors="replace")
            return {"decision": BLOCK, "reason": f"troy refused the check ({err.code}): {detail.strip()}"}
        except Exception as err:  # noqa: BLE001 - whatever kept troy from answering
            if self.fail_open:
                return {"decision": ALLOW, "reason": f"troy unreachable, failing open: {err}"}
            return {"decision": BLOCK, "reason": f"troy unreachable, failing closed: {err}"}
        if not isinstance(d, dict) or d.get("decision") not in (ALLOW, BLOCK):
            return {"decision": BLOCK, "reason": f"troy's answer is not a decision, failing closed: {str(d)[:200]}"}
        return d

    def guard(self, tool: str, input: Any = None, **kw: Any) -> Dict[str, Any]:
        """check, raising TroyBlocked when the action is blocked."""
        d = self.check(tool, input, **kw)
        if d.get("decision") != ALLOW:
            raise TroyBlocked(tool, d)
        return d

    def trace(self, trace_id: str, agent: str) -> "Trace":
        return Trace(self, trace_id, agent)


class Trace:
    """A run streamed into troy's live audit, a step at a time.

    A step troy did not take never breaks the run: it is kept in ``errors``.
    """

    def __init__(self, client: TroyClient, trace_id: str, agent: str):
        self.client = client
        self.trace_id = trace_id
        self.agent = agent
        self.n = 0
        self.errors: list = []

    def step(self, type: str, name: Optional[str] = None, input: Any = None, output: Any = None,
             metadata: Optional[Dict[str, Any]] = None) -> None:
        self.n += 1
        st: Dict[str, Any] = {"step_id": str(self.n), "type": type, "timestamp": datetime.now(timezone.utc).isoformat()}
        for k, v in (("name", name), ("input", input), ("output", output), ("metadata", metadata)):
            if v is not None:
                st[k] = v
        path = "/v1/traces/" + urllib.parse.quote(self.trace_id, safe="") + "/steps?agent=" + urllib.parse.quote(self.agent)
        try:
            self.client._post(path, st)
        except Exception as err:  # noqa: BLE001 - the run goes on; the failure is reported
            self.errors.append(f"step {self.n}: {err}")

    def end(self) -> list:
        """End the trace (its report follows); returns what could not be sent."""
        try:
            self.client._post("/v1/traces/" + urllib.parse.quote(self.trace_id, safe="") + "/end", {})
        except Exception as err:  # noqa: BLE001
            self.errors.append(f"end: {err}")
        return self.errors


def as_input(value: Any) -> Any:
    """A tool's input as troy sees it: JSON text parsed, other text wrapped."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
            if isinstance(parsed, dict):
                return parsed
        except ValueError:
            pass
        return {"input": value}
    return value


MetadataFn = Callable[[str, Any], Optional[Dict[str, Any]]]
