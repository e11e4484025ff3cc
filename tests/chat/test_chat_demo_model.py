# SPDX-License-Identifier: MIT
"""The REPL on the built-in demo model: the whole loop a newcomer sees.

The demo model is trained to answer a few prompts and to call the calculator for
arithmetic; this drives stream → tool call → inline approval → result → answer.
The model ships with the package (``mp13_engine/testing/_demo_model``), so this runs
on the very copy a newcomer gets, in seconds.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def demo_engine(tmp_path_factory):
    from mp13_engine import Engine
    from mp13_engine.testing import demo_model_path

    path = demo_model_path(tmp_path_factory.mktemp("cache"))  # empty cache: the shipped copy
    engine = Engine.load(str(path), device="cpu")
    yield engine
    engine.close()


def test_demo_answers_and_runs_a_tool_round_with_approval(make_chat, demo_engine):
    from mp13_engine.testing import DEMO_PROMPTS

    h = make_chat(demo_engine)
    prompt, answer = DEMO_PROMPTS[0]
    out = h.run(prompt)
    assert answer in out
    h.app.toolbox.set_approval("calculator", "ask")
    out = h.run("what is 17*23?", "y")
    assert "calculator" in out and "391" in out
    path = [n.turn for n in h.app.cursor.path() if n.turn is not None]
    tool_turn = next(t for t in path if t.role.value == "tool")
    assert tool_turn.tool_results[0].content == "391"
    assert "391" in path[-1].text  # the answer quotes the result


def test_starting_on_the_demo_model_says_what_to_try_and_asks_before_any_tool(
    make_chat, tmp_path, monkeypatch, capsys
):
    import sys

    from mp13_engine.testing import DEMO_PROMPTS
    from mp13chat import ChatApp
    from tests.chat._stdin import FakeStdin

    monkeypatch.setenv("MP13_CACHE", str(tmp_path / "cache"))  # empty: the shipped copy
    h = make_chat(None, model="demo")  # no engine given: the app loads the model
    said = " ".join(h.out.getvalue().split())
    assert "model: built-in demo model · cpu" in said
    assert "a tiny model trained on a few prompts; try 'hello', " in said
    assert "the demo asks before running a tool; /tools approval NAME allow stops that" in said
    assert {t.approval.value for t in h.app.toolbox.list()} == {"ask"}
    # Answering once (-p) on the demo model prints the answer only: no notes, no asking.
    prompt, answer = DEMO_PROMPTS[0]
    monkeypatch.setattr(sys, "stdin", FakeStdin("", True))
    assert ChatApp().main(["--model", "demo", "-p", prompt]) == 0
    out, err = capsys.readouterr()
    assert out == f"{answer}\n"
    assert "trained on a few prompts" not in err and "asks before" not in err
