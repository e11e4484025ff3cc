# SPDX-License-Identifier: MIT
"""REPL commands as a user types them, against the scripted FakeEngine: settings,
the system message, tool scopes and policies, the config, what the model sees, and
Tab completion of every kind of argument."""

from __future__ import annotations

import json

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from mp13_context.testing import FakeEngine, FakeReply
from mp13_toolbox import ToolCall
from mp13chat._cli import parse_cli
from mp13chat._completer import CommandCompleter
from tests.chat._output import table_rows


def _flat(out: str) -> str:
    """The output with its line wrapping undone (rich wraps long lines)."""
    return " ".join(out.split())


def _panel(out: str) -> str:
    """The text inside the first printed panel, its border and padding removed."""
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    bottom = next(i for i, line in enumerate(lines) if i > top and line.startswith("╰"))
    return "\n".join(line.strip("│").strip() for line in lines[top + 1 : bottom])


def test_params_shows_branch_parameters_and_display_settings(make_chat):
    h = make_chat(FakeEngine(), params={"max_new_tokens": 9})
    out = h.run("/set temperature 0.5", "/set markdown off", "/params")
    assert table_rows(out)["max_new_tokens"] == ["9", "branch"]
    assert table_rows(out)["temperature"] == ["0.5", "branch"]
    assert table_rows(out)["markdown"] == ["False", "display"]
    assert table_rows(out)["stream"] == ["True", "display"]
    assert "unset parameters use the engine's defaults" in out
    # /settings is the same command; an unset parameter leaves the table
    out = h.run("/unset temperature", "/settings")
    assert "temperature back to its default" in out
    assert "temperature" not in table_rows(out)
    # wrong input says what is expected and changes nothing
    out = _flat(h.run("/set stream maybe", "/set stream", "/unset"))
    assert "error: stream is on or off, got 'maybe'; usage: /set NAME VALUE" in out
    assert "error: give a name and a value; usage: /set NAME VALUE" in out
    assert "error: give a parameter name; usage: /unset NAME" in out
    assert h.app.config.stream is True


def test_system_add_none_and_default_change_what_the_model_sees(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)
    out = h.run("/system")
    assert "no system message set: the chat template's default applies" in out
    out = h.run("/system set Be brief.", "/system add Answer in French.", "one")
    assert "system message set" in out
    assert _panel(out) == "Be brief.\n\nAnswer in French."  # /system add shows the result
    assert engine.requests[-1].messages[0] == {
        "role": "system",
        "content": "Be brief.\n\nAnswer in French.",
    }
    out = h.run("/system none", "two")
    assert "system message: none (an empty one is sent)" in out
    assert engine.requests[-1].messages[0] == {"role": "system", "content": ""}
    out = h.run("/system default", "three")
    assert "no system message set: the chat template's default applies" in out
    assert engine.requests[-1].messages[0] == {"role": "user", "content": "one"}
    # each change is recorded on the branch, where /tree shows it
    out = h.run("/tree")
    assert "system set 'Be brief.'; system add 'Answer in French.'" in out
    assert "⚙ system none" in out and "⚙ system default" in out


def test_tool_scopes_set_show_pop_and_tool_policies(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)
    out = h.run("/tools scope show")
    assert "no scope layers: every tool in its global mode" in out
    out = h.run("/tools scope set calculator=disabled current_time=silent", "go")
    assert table_rows(out)["calculator"][:2] == ["advertised", "disabled"]
    assert table_rows(out)["current_time"][:2] == ["advertised", "silent"]
    assert [t["function"]["name"] for t in engine.requests[-1].tools] == ["tool_help"]
    out = h.run("/tools scope show")
    assert table_rows(out)["1"] == ["calculator=disabled current_time=silent", ""]
    out = h.run("/tools scope pop", "go again")
    assert table_rows(out)["calculator"][:2] == ["advertised", "advertised"]
    assert "calculator" in [t["function"]["name"] for t in engine.requests[-1].tools]
    out = h.run("/tree")
    assert "tools set calculator=disabled, current_time=silent" in out and "tools pop" in out
    out = _flat(h.run("/tools scope add calculator", "/tools scope add calculator="))
    assert "write scope entries as NAME=MODE (e.g. '*=silent'), got 'calculator'" in out
    assert "unknown tool mode ''; use one of: advertised, silent, disabled" in out
    out = _flat(h.run("/tools scope add calculator=bogus"))
    assert "error: unknown tool mode 'bogus'; use one of: advertised, silent, disabled" in out
    assert h.app.cursor.tools.show() == ()
    # risk picks the default approval policy; the table shows it
    out = h.run("/tools risk calculator high", "/tools")
    assert "calculator: risk high" in out
    assert table_rows(out)["calculator"][2:4] == ["high", "ask (risk)"]
    out = _flat(h.run("/tools risk calculator extreme"))
    assert "error: unknown risk 'extreme'; use one of: low, medium, high" in out
    assert "usage: /tools risk NAME low|medium|high" in out
    out = _flat(h.run("/tools mode calculator bogus"))  # the same shape as risk's
    assert "unknown tool mode 'bogus'; use one of: advertised, silent, disabled" in out
    assert "usage: /tools mode NAME|PATTERN advertised|silent|disabled" in out
    assert h.app.toolbox.get("calculator").risk.value == "high"
    # an explicit policy, then back to the risk's default; a remembered answer forgotten
    h.run("/tools approval calculator deny")
    assert h.app.toolbox.get("calculator").approval.value == "deny"
    out = h.run("/tools approval calculator default")
    assert "calculator: approval default" in out
    assert h.app.toolbox.get("calculator").approval is None
    h.app.toolbox.remember("calculator", "always")
    out = h.run("/tools approval calculator forget")
    assert "calculator: remembered answer forgotten" in out
    assert h.app.toolbox.remembered() == {}


def test_a_wrong_approval_policy_names_the_repl_choices(make_chat):
    h = make_chat(FakeEngine())
    out = _flat(h.run("/tools approval calculator maybe"))
    assert (
        "error: unknown approval policy 'maybe'; use one of: allow, deny, ask, default, forget"
        in out
    )
    assert "None" not in out  # the toolbox's Python wording stays out of the REPL
    assert h.app.toolbox.get("calculator").approval is None


def test_config_shows_where_it_came_from_every_field_and_its_meaning(make_chat, tmp_path):
    # The harness hands ChatApp its own ChatConfig (as a wrapper app does): the title
    # named config.json, a file that was never read.
    h = make_chat(FakeEngine(), system="Be terse.")
    out = h.run("/config")
    assert "config (the app's ChatConfig, no file read)" in _flat(out)
    assert "config.json" not in out
    rows = table_rows(out)
    assert rows["system"][:2] == [
        "'Be terse.'",
        "System message set on every new conversation (null = the",
    ]
    assert rows["stream"][:2] == ["True", "Print replies token by token as they are generated."]
    assert {"model", "engine", "session", "params", "tool_approvals"} <= set(rows)


def test_config_names_the_file_it_read_and_the_flags_on_top(make_chat, tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"system": "From the file."}))
    h = make_chat(FakeEngine())
    h.app.apply_options(parse_cli(["--config", str(path)]))
    assert f"config ({path})" in _flat(h.run("/config"))
    h.app.apply_options(parse_cli(["--config", str(path), "--system", "From the flag."]))
    assert f"config ({path} + command-line flags)" in _flat(h.run("/config"))


def test_messages_search_save_and_warnings_report_the_session(make_chat, tmp_path):
    h = make_chat(FakeEngine())
    h.run("/system set Be brief.", "hello")
    out = h.run("/messages")
    assert json.loads(_panel(out)) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "echo: hello"},
    ]
    assert "no matches" in h.run("/search zebra")
    assert f"saved as you go in {tmp_path / 'chats0.db'}" in _flat(h.run("/save"))
    assert "no library warnings in this run" in h.run("/warnings")
    memory = make_chat(FakeEngine(), session=":memory:")
    out = memory.run("/save")
    assert "this session is in memory only: /save FILE keeps it" in out


def test_branch_commands_check_their_arguments(make_chat):
    h = make_chat(FakeEngine())
    h.run("one")
    out = _flat(h.run("/trim many", "/trim 0", "/batch only one"))
    assert "error: N must be a whole number, got 'many'; usage: /trim [N]" in out
    assert "error: N must be at least 1, got 0; usage: /trim [N]" in out
    assert "error: give at least two prompts separated by |" in out
    assert [n.turn.text for n in h.app.cursor.path() if n.turn] == ["one", "echo: one"]
    out = h.run("/help quit")
    assert "aliases: /exit" in out


def test_commands_without_arguments_refuse_extra_words_and_show_their_usage(make_chat):
    h = make_chat(FakeEngine())
    h.run("one")
    before = [n.turn.text for n in h.app.cursor.path() if n.turn]
    out = _flat(h.run("/quit now", "/retry please", "/tools scope pop x", "/help quit now"))
    assert "error: /quit takes no arguments, got 'now'; usage: /quit" in out
    assert "error: /retry takes no arguments, got 'please'; usage: /retry" in out
    assert "/tools scope pop takes no arguments, got 'x'; usage: /tools scope pop" in out
    assert "/quit has no subcommands, so 'now' names none; type /quit alone" in out
    # None of them ran: the loop went on (no quit) and no retry was made.
    assert [n.turn.text for n in h.app.cursor.path() if n.turn] == before
    assert len(h.app.cursor.siblings()) == 1
    assert "aliases: /exit" in h.run("/help quit")  # the command path alone still works


def test_adapter_choices_on_an_engine_that_names_its_own_are_recorded(make_chat):
    # FakeEngine is another engine client: it answers for adapter names itself, so the
    # REPL records the choice without checking it against mp13's adapter manager.
    engine = FakeEngine()
    h = make_chat(engine)
    out = h.run("/adapters use tuned", "/adapters add extra", "hi")
    assert "this branch uses tuned" in out and "this branch uses tuned, extra" in out
    assert engine.requests[-1].adapters == ("tuned", "extra")
    h.run("/adapters base")
    assert "adapters set tuned; adapters add extra" in h.run("/tree")
    assert "adapters set base model" in h.run("/tree")


def test_tab_completes_paths_nodes_conversations_and_arguments(make_chat, tmp_path, monkeypatch):
    h = make_chat(FakeEngine())
    h.run("/title first", "hi", "/new", "/title second")
    completer = CommandCompleter(h.app)

    def complete(text: str) -> list[str]:
        return [c.text for c in completer.get_completions(Document(text), CompleteEvent())]

    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "rows.jsonl").write_text("")
    (work / "data" / ".hidden").write_text("")
    (work / "dump.json").write_text("")
    (work / "it's.json").write_text("")
    monkeypatch.chdir(work)
    # paths: folders end with /, hidden files only when asked for, a word with a quote
    assert complete("/import ") == ["data/", "dump.json", "it's.json"]
    assert complete("/import d") == ["data/", "dump.json"]
    assert complete("/import data/") == ["data/rows.jsonl"]
    assert complete("/import data/.") == ["data/.hidden"]
    assert complete("/import it'") == ["it's.json"]  # not shell syntax: matched as typed
    assert complete("/import nowhere/x") == []
    assert complete("/import dump.json ") == ["copy"]
    assert complete("/export d") == ["data/", "dump.json"]
    assert complete("/export dump.json ") == ["overwrite"]
    assert complete("/open d") == ["data/", "dump.json"]
    # nodes of this conversation, conversations of the session
    session = h.app.session
    here = [n.id[:6] for n in session.conversation_nodes(h.app.cursor.conversation_id)]
    assert complete("/goto ") == here
    assert complete(f"/goto {here[0]} ") == []  # one node only
    ids = sorted(c.id[:6] for c in session.conversations())
    assert sorted(complete("/switch ")) == ids
    assert sorted(complete("/replay ")) == ids
    # training: the dataset is a path, then key=value options
    assert complete("/train start fact d") == ["data/", "dump.json"]
    assert complete("/train start fact data/rows.jsonl max_st") == ["max_steps="]
    assert "lora_r=" in complete("/train start fact data/rows.jsonl ")
    # /adapters load: saved adapters by name first, then paths
    saved = tmp_path / "adapters" / "mine"
    saved.mkdir(parents=True)
    (saved / "adapter_config.json").write_text("{}")
    assert complete("/adapters load ") == ["mine", "data/", "dump.json", "it's.json"]
    assert complete("/adapters load mine ") == []  # the second word is a new name
    # scope assignments, settings values, /help's subcommands
    assert complete("/tools scope add cur") == [
        "current_time=advertised",
        "current_time=silent",
        "current_time=disabled",
    ]
    assert complete("/tools scope set *=d") == ["*=disabled"]
    assert complete("/tools risk calculator ") == ["low", "medium", "high"]
    assert complete("/set stream ") == ["on", "off"]
    assert complete("/set temperature ") == []
    assert complete("/help tools ") == ["list", "mode", "scope", "approval", "risk"]
    assert complete("/help nosuch ") == []
    assert complete("/help tools scope ") == ["show", "add", "set", "pop", "reset"]
    assert complete("/help tools list ") == []
    assert complete("/tree ") == ["all"]
    # no completer, or one that cannot answer here (no adapter manager): nothing
    assert complete("/fork ") == []
    assert complete("/adapters unload ") == []


def test_reasoning_and_failed_replies_are_shown_as_such(make_chat):
    engine = FakeEngine()
    engine.script(
        FakeReply(reasoning="let me think", text="the answer"),
        FakeReply(reasoning="hmm", text="again"),
        FakeReply(error="the model broke"),
        "fine",
        FakeReply(error="out of memory"),
    )
    h = make_chat(engine)
    out = h.run("q1")
    assert "let me think\nthe answer" in out  # streamed reasoning ends its line first
    out = h.run("/set stream off", "q2")
    assert out.count("hmm") == 1 and out.count("again") == 1
    assert out.index("hmm") < out.index("again")
    out = h.run("q3")
    assert "error: the model broke" in out
    assert h.app.cursor.turn.error == "the model broke"
    out = h.run("q4", "/retry")
    assert "error: out of memory" in out
    assert "same reply as before" not in out  # a failed retry needs no greedy-decoding note
    out = h.run("/history")
    assert "let me think\nthe answer" in out
    out = h.run("/set show_reasoning off", "/history")
    assert "the answer" in out and "let me think" not in out


def test_prompt_with_a_message_shows_it_in_place_and_counts_it(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)
    h.run("hello")
    out = h.run("/prompt what is 2+2?")
    text = h.app.cursor.prompt("what is 2+2?")
    assert f"prompt ({engine.count_tokens(text)} tokens)" in out
    assert "what is 2+2?" in _panel(out) and "‹your message›" not in out
    assert len(engine.requests) == 1  # shown, never sent


def test_prompt_and_tokens_on_a_new_conversation_without_a_system_message(make_chat):
    """Nothing is recorded yet: the preview is the prompt around the first message (it
    failed with 'invalid Request.messages=[]')."""
    engine = FakeEngine()
    h = make_chat(engine)
    out = h.run("/prompt", "/tokens", "/prompt first words")
    assert "invalid" not in out and "error" not in out.lower()
    assert "‹your message›" in out and "first words" in out
    empty = engine.count_tokens(h.app.cursor.prompt(""))
    assert f"prompt ({empty} tokens + your message)" in out
    assert engine.requests == []  # shown, never sent


def test_prompt_preview_when_the_template_repeats_the_message(make_chat):
    class RepeatingTemplate(FakeEngine):
        """A chat template that quotes the last message again at the end."""

        def format_prompt(self, request):
            last = request.messages[-1]["content"]
            return super().format_prompt(request) + f"(you asked: {last})"

    engine = RepeatingTemplate()
    h = make_chat(engine)
    h.run("hello")
    out = h.run("/prompt")
    shown = _panel(out)
    # no single place for the message: the whole prompt, the slot wherever it goes
    assert shown.count("‹your message›") == 2
    assert shown.endswith("(you asked: ‹your message›)")
    # the count is of the prompt without the message, not of the slot's own words
    text = engine.format_prompt(h.app.cursor.request(""))
    assert f"prompt ({engine.count_tokens(text)} tokens + your message)" in out


def test_a_tool_result_cut_by_the_toolbox_says_so(make_chat):
    def report() -> str:
        """A long report."""
        return "line of the report " * 40

    engine = FakeEngine()
    engine.script(FakeReply(tool_calls=[ToolCall("report", {}, id="r1")]), "summarised")
    h = make_chat(engine, app_kwargs={"tools": [report]})
    h.app.toolbox.max_output_chars = 60
    out = h.run("the report please")
    assert "report → result (truncated)" in out
    [result] = [n.turn for n in h.app.cursor.path() if n.turn and n.turn.role.value == "tool"]
    assert result.tool_results[0].truncated
    assert "echo" not in out and "summarised" in out
