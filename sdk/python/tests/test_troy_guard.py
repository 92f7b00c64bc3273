"""troy_guard against a real troy serve (TROY_BIN, or built with go).

The frameworks cannot be installed here: each adapter's hook is driven by
a stand-in with the framework's documented call signature (LangChain's
callback methods, the Agents SDK's guardrail data and spans, CrewAI's
ToolCallHookContext)."""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from troy_guard import TroyBlocked, TroyClient  # noqa: E402
from troy_guard.adapters import crewai as crew  # noqa: E402
from troy_guard.adapters import langchain as lc  # noqa: E402

POLICY = """policy_id: py
rules:
  - rule_id: network-after-secret
    description: a network call after a secret was read
    severity: critical
    condition: step.name == 'http_post' and any_prev({ .name == 'read_secret' })
  - rule_id: no-rm-rf
    description: a shell command deletes recursively
    severity: high
    condition: step.name == 'shell' and matches(text(step.input), 'rm -rf')
"""

SERVER = {}


def setUpModule():
    work = tempfile.mkdtemp(prefix="troy-py-")
    SERVER["work"] = work
    binary = os.environ.get("TROY_BIN")
    if not binary:
        binary = os.path.join(work, "troy")
        subprocess.run(["go", "build", "-o", binary, "./cmd/troy"], cwd=os.path.join(HERE, "..", "..", ".."), check=True)
    with open(os.path.join(work, "p.yaml"), "w") as f:
        f.write(POLICY)
    proc = subprocess.Popen([os.path.abspath(binary), "serve", "--nats-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--policy", "p.yaml",
                             "--data-dir", "data", "--reports-dir", "reports", "--stream-idle", "1h"],
                            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    SERVER["proc"] = proc
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stdout.readline()
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "http:":
            SERVER["url"] = fields[1]
            return
    raise RuntimeError("troy serve printed no HTTP address")


def tearDownModule():
    SERVER["proc"].kill()
    SERVER["proc"].wait()
    shutil.rmtree(SERVER["work"], ignore_errors=True)


def client(**kw):
    return TroyClient(SERVER["url"], **kw)


def report(trace_id, want, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for path in glob.glob(os.path.join(SERVER["work"], "reports", "*", trace_id, "report.md")):
            with open(path) as f:
                text = f.read()
            if want in text:
                return text
        time.sleep(0.2)
    raise AssertionError(f"no report of {trace_id} with {want!r}")


class ClientTest(unittest.TestCase):
    def test_allow_block_and_fail_closed(self):
        c = client()
        self.assertEqual(c.check("shell", {"cmd": "ls"})["decision"], "allow")
        d = c.check("shell", {"cmd": "rm -rf /"}, agent="py-agent")
        self.assertEqual(d["decision"], "block")
        self.assertEqual(d["violations"][0]["rule_id"], "no-rm-rf")
        with self.assertRaises(TroyBlocked) as ctx:
            c.guard("shell", {"cmd": "rm -rf /"})
        self.assertIn("rule no-rm-rf (high)", str(ctx.exception))

        dead = TroyClient("http://127.0.0.1:9", timeout=1)
        self.assertEqual(dead.check("shell", {"cmd": "ls"})["decision"], "block", "unreachable: fails closed")
        self.assertEqual(TroyClient("http://127.0.0.1:9", timeout=1, fail_open=True).check("shell")["decision"], "allow")

    def test_a_session_sees_earlier_calls(self):
        c, s = client(), "s-" + uuid.uuid4().hex
        self.assertEqual(c.check("read_secret", session_id=s)["decision"], "allow")
        self.assertEqual(c.check("http_post", {"url": "https://x"}, session_id=s)["decision"], "block")
        self.assertEqual(c.check("http_post", {"url": "https://x"}, session_id="other-" + s)["decision"], "allow")

    def test_trace_streams_into_the_live_audit(self):
        t = client().trace("py-trace-" + uuid.uuid4().hex[:8], "py-agent")
        t.step("tool_call", "read_secret", {"vault": "prod"}, {"value": "***"})
        t.step("tool_call", "http_post", {"url": "https://x"}, {"status": 200})
        self.assertEqual(t.end(), [])
        self.assertIn("network-after-secret", report(t.trace_id, "network-after-secret"))


class LangChainTest(unittest.TestCase):
    def test_handler_blocks_and_streams(self):
        run = "lc-" + uuid.uuid4().hex[:8]
        h = lc.callback_handler(client(), run, "lc-agent", metadata_fn=lambda tool, value: {"tenant": "acme"})
        self.assertTrue(h.raise_error, "LangChain must propagate a refusal")
        # as LangChain calls it: on_tool_start(serialized, input_str, *, run_id, inputs, ...)
        h.on_tool_start({"name": "read_secret"}, '{"vault": "prod"}', run_id=1)
        h.on_tool_end("sk-...", run_id=1)
        with self.assertRaises(TroyBlocked):
            h.on_tool_start({"name": "http_post"}, '{"url": "https://evil"}', run_id=2)
        h.on_llm_end(types.SimpleNamespace(generations=[[types.SimpleNamespace(text="done")]]))
        h.on_chain_end({"output": "done"}, parent_run_id=None)
        self.assertEqual(h.close(), [])
        self.assertIn("network-after-secret", report(run, "network-after-secret"))

    def test_guarded_function(self):
        calls = []

        def shell(cmd):
            calls.append(cmd)
            return "ok"

        g = lc.guarded(shell, client(), session_id="g-" + uuid.uuid4().hex, agent="lc")
        self.assertEqual(g("ls"), "ok")
        with self.assertRaises(TroyBlocked):
            g("rm -rf /")
        self.assertEqual(calls, ["ls"], "a blocked call never runs")
        self.assertEqual(g.__name__, "shell", "the tool keeps its name for @tool")


class OpenAIAgentsTest(unittest.TestCase):
    def setUp(self):
        # a stand-in for the agents package: the documented names and shapes
        class Output:
            def __init__(self, behavior, message=None, output_info=None):
                self.behavior, self.message, self.output_info = behavior, message, output_info

            @classmethod
            def allow(cls, output_info=None):
                return cls("allow", output_info=output_info)

            @classmethod
            def reject_content(cls, message, output_info=None):
                return cls("reject_content", message, output_info)

        mod = types.ModuleType("agents")
        mod.ToolGuardrailFunctionOutput = Output
        mod.tool_input_guardrail = lambda fn: fn
        sys.modules["agents"] = mod
        self.addCleanup(sys.modules.pop, "agents", None)

    def test_guardrail_and_trace_processor(self):
        from troy_guard.adapters import openai_agents as oa

        g = oa.tool_input_guardrail(client(), agent="oa-agent", session_id="oa-" + uuid.uuid4().hex)
        data = lambda name, args: types.SimpleNamespace(context=types.SimpleNamespace(tool_name=name, tool_arguments=json.dumps(args)))
        self.assertEqual(g(data("shell", {"cmd": "ls"})).behavior, "allow")
        out = g(data("shell", {"cmd": "rm -rf /"}))
        self.assertEqual(out.behavior, "reject_content")
        self.assertIn("rule no-rm-rf", out.message)

        p = oa.TraceProcessor(client(), "oa-agent")
        trace_id = "oa-trace-" + uuid.uuid4().hex[:8]
        trace = types.SimpleNamespace(trace_id=trace_id, name="oa-agent")
        p.on_trace_start(trace)
        span = lambda data: types.SimpleNamespace(trace_id=trace_id, span_data=data)
        p.on_span_end(span(types.SimpleNamespace(type="generation", model="gpt", input=[{"role": "user", "content": "go"}], output=[])))
        p.on_span_end(span(types.SimpleNamespace(type="function", name="read_secret", input="{}", output="***")))
        p.on_span_end(span(types.SimpleNamespace(type="function", name="http_post", input='{"url": "https://x"}', output="200")))
        p.on_trace_end(trace)
        self.assertEqual(p.errors, [])
        self.assertIn("network-after-secret", report(trace_id, "network-after-secret"))


class CrewAITest(unittest.TestCase):
    def test_before_tool_hook(self):
        hook = crew.before_tool_hook(client(), session_id="crew-" + uuid.uuid4().hex)
        ctx = lambda name, value: types.SimpleNamespace(tool_name=name, tool_input=value, agent=types.SimpleNamespace(role="researcher"))
        self.assertIsNone(hook(ctx("shell", {"cmd": "ls"})), "allowed: the call goes on")
        self.assertIs(hook(ctx("shell", {"cmd": "rm -rf /"})), False, "blocked: CrewAI does not run it")

        def broken(tool, value):
            raise RuntimeError("metadata lookup failed")

        bad = crew.before_tool_hook(client(), metadata_fn=broken)
        self.assertIs(bad(ctx("shell", {"cmd": "ls"})), False, "a hook that fails refuses (CrewAI runs the tool when a hook raises)")


if __name__ == "__main__":
    unittest.main()
