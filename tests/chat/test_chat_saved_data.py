# SPDX-License-Identifier: MIT
"""In the REPL, an imported conversation's scope commands cannot widen the app's tools.

``/import`` of a document that says every tool is advertised, then ``/switch`` to it and
a message, and ``/replay`` of it: the tool the app registered disabled never runs, the
silent one is never advertised, the global modes ``/tools`` shows are unchanged.
"""

from __future__ import annotations

from mp13_context import ChatContext, Session
from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import Toolbox, ToolCall, ToolsScope
from mp13chat import register_tool

RAN: list[str] = []


@register_tool(mode="disabled")
def wipe_disk() -> str:
    """Erase everything."""
    RAN.append("wipe_disk")
    return "wiped"


@register_tool(mode="silent")
def shell() -> str:
    """Run a shell."""
    RAN.append("shell")
    return "shell ran"


def _permissive_export(tmp_path):
    tb = Toolbox()
    for name in ("wipe_disk", "shell"):
        tb.register(lambda: "ok", name=name)
    with Session.open(":memory:") as source:
        cur = ChatContext(source, engine=FakeEngine(), toolbox=tb).cursor(title="foreign")
        cur.tools.set(ToolsScope({"*": "advertised"}))
        cur.ask("go")
        path = tmp_path / "foreign.json"
        source.export_json(path)
    return path


def _responder(request):
    if request.messages[-1]["role"] == "tool":
        return FakeReply(text="done")
    return FakeReply(tool_calls=[ToolCall("wipe_disk"), ToolCall("shell")])


def test_import_switch_and_replay_never_widen_the_apps_tools(make_chat, tmp_path):
    RAN.clear()
    engine = FakeEngine(responder=_responder)
    h = make_chat(engine, app_kwargs={"tools": [wipe_disk, shell]})
    path = _permissive_export(tmp_path)
    h.run(f"/import {path}", "/switch foreign", "again")
    h.run("/replay foreign")
    assert set(RAN) == {"shell"}  # the silent tool still runs when called; wipe_disk never
    for request in engine.requests:
        advertised = {t["function"]["name"] for t in request.tools or ()}
        assert not advertised & {"wipe_disk", "shell"}
    assert h.app.toolbox.get("wipe_disk").mode.value == "disabled"
    assert h.app.toolbox.get("shell").mode.value == "silent"
    out = " ".join(h.run("/tools list").split())
    assert "wipe_disk │ disabled │ disabled" in out and "shell │ silent │ silent" in out
