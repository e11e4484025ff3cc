# SPDX-License-Identifier: MIT
"""The REPL against the scripted FakeEngine: chat, branching, tools, sessions, errors."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from mp13_context.testing import FakeEngine, FakeReply
from mp13_engine import FinishReason, Request
from mp13_toolbox import ToolCall


def turns(app):
    """(role, text) of the turns on the current branch."""
    return [(n.turn.role.value, n.turn.text) for n in app.cursor.path() if n.turn is not None]


def test_a_chat_streams_the_reply_and_records_the_turns(make_chat):
    h = make_chat(FakeEngine())
    out = h.run("hello there")
    assert "echo: hello there" in out
    assert turns(h.app) == [("user", "hello there"), ("assistant", "echo: hello there")]
    # the reply footer reports how it ended
    assert "stop" in out


def test_non_streaming_reply_prints_once(make_chat):
    h = make_chat(FakeEngine(), stream=False)
    out = h.run("hi")
    assert out.count("echo: hi") == 1


def test_config_system_message_and_params_apply_to_new_conversations(make_chat):
    engine = FakeEngine()
    h = make_chat(engine, system="Be terse.", params={"max_new_tokens": 7})
    h.run("hi")
    request = engine.requests[-1]
    assert request.messages[0] == {"role": "system", "content": "Be terse."}
    assert request.max_new_tokens == 7


def test_fork_leaves_the_old_branch_alone(make_chat):
    h = make_chat(FakeEngine())
    h.run("first")
    before = h.app.cursor
    h.run("/fork alt", "second")
    assert turns(h.app)[-2:] == [("user", "second"), ("assistant", "echo: second")]
    assert [t for t in turns(h.app) if t[0] == "user"] == [("user", "first"), ("user", "second")]
    # the cursor we left still ends at the first reply
    assert before.turn.text == "echo: first"
    assert len(h.app.session.children(before.node_id)) == 1  # the fork hub
    out = h.run("/tree")
    assert "⑂ fork alt" in out and "you are here" in out
    assert "fork_hub" not in out and "placeholder" not in out


def test_retry_under_greedy_decoding_says_why_the_reply_is_the_same(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)
    out = h.run("q", "/retry")
    assert "same reply as before: decoding is greedy" in out
    assert "/set do_sample on" in out
    out = h.run("/set do_sample on", "/set temperature 0.8", "/set seed 7", "/retry")
    assert "seed 7 makes sampling repeat itself; /unset seed" in out
    out = h.run("/unset seed", "/retry")
    assert "same reply as before" not in out  # sampling: same text by chance, nothing to say
    engine.script("something else")
    out = h.run("/set do_sample off", "/retry")
    assert "same reply as before" not in out  # a different reply needs no explanation


def test_a_conversation_is_titled_by_its_first_question(make_chat):
    h = make_chat(FakeEngine())
    h.run("How do I keep a sourdough starter alive through a long summer holiday?", "more")
    cid = h.app.cursor.conversation_id
    title = h.app.session.conversation(cid).title
    assert title == "How do I keep a sourdough starter alive through…"
    assert title in h.run("/list")
    h.run("/new", "/title chosen", "first here")
    assert h.app.session.conversation(h.app.cursor.conversation_id).title == "chosen"


def test_retry_adds_a_sibling_reply_and_prev_next_move_between_them(make_chat):
    engine = FakeEngine()
    engine.script("one", "two")
    h = make_chat(engine)
    h.run("q", "/retry")
    assert h.app.cursor.turn.text == "two"
    siblings = h.app.cursor.siblings()
    assert [s.turn.text for s in siblings] == ["one", "two"]
    h.run("/prev")
    assert h.app.cursor.turn.text == "one"
    h.run("/next")
    assert h.app.cursor.turn.text == "two"


def test_try_out_close_and_promote(make_chat):
    h = make_chat(FakeEngine())
    h.run("base")
    origin = h.app.cursor.node_id
    h.run("/try", "experiment", "/close")
    assert h.app.cursor.node_id == origin
    h.run("/try", "keeper", "/promote")
    assert turns(h.app)[-1] == ("assistant", "echo: keeper")
    out = h.run("/promote")
    assert "not in a try-out" in out


def test_batch_makes_one_branch_per_prompt_in_one_wave(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)
    out = h.run("/batch red | green | blue")
    assert "echo: red" in out and "echo: blue" in out
    assert engine.max_in_flight == 3
    hub = h.app.session.children(h.app.cursor.node_id)
    assert len(hub) == 1 and len(h.app.session.children(hub[0].id)) == 3


def test_trim_and_continue(make_chat):
    engine = FakeEngine()
    engine.script(FakeReply(text="cut", finish_reason=FinishReason.LENGTH))
    h = make_chat(engine)
    out = h.run("long one")
    assert "truncated" in out
    h.run("/continue")
    assert h.app.cursor.turn.text == "cut (more)"
    h.run("/trim")
    assert turns(h.app) == []


def test_system_commands_are_recorded_on_the_branch(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)
    out = h.run("/system set You are a pirate.", "/system", "ahoy")
    assert "You are a pirate." in out
    assert engine.requests[-1].messages[0]["content"] == "You are a pirate."
    h.run("/system pop", "again")
    assert engine.requests[-1].messages[0]["role"] == "user"


def test_set_changes_branch_params_and_display_settings(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)
    h.run("/set temperature 0.25", "/set do_sample on", "/set min_p 0.1", "/set stream off", "go")
    assert engine.requests[-1].temperature == 0.25
    assert engine.requests[-1].min_p == 0.1
    assert engine.requests[-1].do_sample is True
    assert h.app.config.stream is False
    out = h.run("/set temperature hot")
    assert "error:" in out and "temperature" in out
    out = h.run("/set min_p 2")
    assert "error:" in out and "min_p must be a number in [0, 1]" in out


def test_tool_round_with_inline_approval(make_chat):
    engine = FakeEngine()
    call = ToolCall("calculator", {"expression": "17*23"}, id="c1")
    engine.script(FakeReply(text="", tool_calls=[call]), "It is 391.")
    h = make_chat(engine)
    h.app.toolbox.set_approval("calculator", "ask")
    out = h.run("what is 17*23?", "y")
    assert "calculator" in out and "391" in out
    tool_turns = [n.turn for n in h.app.cursor.path() if n.turn and n.turn.role.value == "tool"]
    assert tool_turns[0].tool_results[0].content == "391"
    assert not tool_turns[0].tool_results[0].is_error
    assert engine.requests[-1].messages[-1]["role"] == "tool"


def test_denied_and_always_answers(make_chat):
    engine = FakeEngine()
    call = ToolCall("calculator", {"expression": "1+1"}, id="c1")
    engine.script(FakeReply(tool_calls=[call]), "denied", FakeReply(tool_calls=[call]), "ok")
    h = make_chat(engine)
    h.app.toolbox.set_approval("calculator", "ask")
    h.run("add", "n")
    results = [n.turn for n in h.app.cursor.path() if n.turn and n.turn.role.value == "tool"]
    assert results[-1].tool_results[0].is_error
    h.run("add again", "a")
    assert h.app.toolbox.remembered()["calculator"].value == "always"
    out = h.run("/tools")
    assert "always remembered" in out


def test_never_answered_with_its_letter_is_remembered(make_chat):
    engine = FakeEngine()
    call = ToolCall("calculator", {"expression": "1+1"}, id="c1")
    engine.script(FakeReply(tool_calls=[call]), "denied")
    h = make_chat(engine)
    h.app.toolbox.set_approval("calculator", "ask")
    out = h.run("add", "V")
    assert "calculator: never" in out
    assert h.app.toolbox.remembered()["calculator"].value == "never"


def test_tools_commands(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)
    out = h.run("/tools list")
    assert "calculator" in out and "current_time" in out
    # later layers win (within one layer, disabled beats advertised)
    h.run("/tools scope add *=disabled", "/tools scope add calculator=advertised", "go")
    names = [t["function"]["name"] for t in engine.requests[-1].tools]
    assert names == ["calculator"]
    h.run("/tools scope reset", "/tools mode current_time silent", "go")
    names = [t["function"]["name"] for t in engine.requests[-1].tools]
    assert "current_time" not in names and "calculator" in names
    out = h.run("/tools scope add nonsense")
    assert "NAME=MODE" in out


def test_search_then_goto_a_hit(make_chat):
    h = make_chat(FakeEngine())
    h.run("the quick brown fox", "/new", "something else")
    hits = h.app.session.search("fox")
    assert hits
    out = h.run("/search fox")
    assert hits[0].node_id[:6] in out
    h.run(f"/goto {hits[0].node_id[:8]}")
    assert h.app.cursor.node_id == hits[0].node_id


def test_search_finds_a_japanese_word_inside_a_sentence(make_chat):
    """/search 東京 said "no matches" for 東京タワーに行きました: the word index kept
    the whole run of characters as one word."""
    h = make_chat(FakeEngine())
    h.run("東京タワーに行きました", "/new", "something else")
    out = h.run("/search 東京")
    assert "no matches" not in out and "2 matches" in out
    assert "タワーに行きました" in out  # the snippet, 東京 marked (highlighted) before it


def test_save_copy_and_reopen(make_chat, tmp_path):
    h = make_chat(FakeEngine())
    h.run("/title first chat", "remember me")
    cid = h.app.cursor.conversation_id
    copy = tmp_path / "copy.db"
    h.run(f"/save {copy}")
    assert copy.exists()
    out = h.run(f"/save {copy}")
    assert "exists" in out
    # a second REPL on the same session file sees the conversation, where it was
    again = make_chat(FakeEngine(), session=str(h.app.session.filename))
    out = again.run("/list", "/switch first chat")
    assert "first chat" in out
    assert again.app.cursor.conversation_id == cid
    assert turns(again.app)[-1] == ("assistant", "echo: remember me")
    # and /open switches this REPL to the copy
    h.run(f"/open {copy}")
    assert h.app.session.filename == str(copy)
    assert any(c.id == cid for c in h.app.session.conversations())


def test_export_and_import(make_chat, tmp_path):
    h = make_chat(FakeEngine())
    h.run("exported words")
    dump = tmp_path / "dump.json"
    h.run(f"/export {dump}")
    other = make_chat(FakeEngine())
    other.run(f"/import {dump}")
    assert other.app.session.search("exported")


def test_export_keeps_a_file_that_exists_unless_told_to_overwrite(make_chat, tmp_path):
    h = make_chat(FakeEngine())
    h.run("first words")
    dump = tmp_path / "dump.json"
    dump.write_text("notes of mine")
    out = " ".join(h.run(f"/export {dump}").split())
    assert f"'{dump}' exists, so nothing was written; pick a new file name, or " in out
    assert f"/export {dump} overwrite to replace it" in out
    assert dump.read_text() == "notes of mine"
    h.run(f"/export {dump} overwrite")
    other = make_chat(FakeEngine())
    other.run(f"/import {dump}")
    assert other.app.session.search("first")
    h.run("second words")
    out = " ".join(h.run(f"/export {dump}").split())
    assert "exists, so nothing was written" in out
    assert "second words" not in dump.read_text()  # the file still holds the first export
    spaced = tmp_path / "my dump.json"
    h.run(f"/export {spaced}")  # a name with spaces needs no quotes ...
    assert spaced.is_file()
    out = " ".join(h.run(f"/export {spaced} overwrite").split())
    assert 'quote a file name with spaces: /export "my file.json" overwrite' in out
    h.run(f'/export "{spaced}" overwrite')  # ... but does with the word after it
    assert "second words" in spaced.read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if "dump" in p.name) == [
        "dump.json",
        "my dump.json",
    ]


def test_replay_into_a_new_conversation_with_a_comparison(make_chat):
    h = make_chat(FakeEngine())
    h.run("/title source", "one", "two")
    source = h.app.cursor.conversation_id
    out = h.run("/replay source")
    assert "2/2 replies identical" in out
    # how far a long replay is, one line as each turn starts
    assert out.index("turn 1 of 2: one") < out.index("turn 2 of 2: two") < out.index("2/2")
    assert h.app.cursor.conversation_id != source
    assert turns(h.app) == [
        ("user", "one"),
        ("assistant", "echo: one"),
        ("user", "two"),
        ("assistant", "echo: two"),
    ]


def test_replay_table_shows_the_footers_speed_figures_not_prefill_in_tok_s():
    """Was: the tok/s column was ``RequestMetrics.tokens_per_s``, which counts the
    prompt's computation: a 2 s prefill and 10 tokens in 0.5 s read as 4.4 tok/s."""
    import io

    from rich.console import Console

    from mp13_context import ReplayReport, ReplayTurn
    from mp13_engine import RequestMetrics
    from mp13chat._cmd_replay import report_table

    def metrics(ttft_s: float, total_s: float) -> RequestMetrics:
        tokens = 11
        return RequestMetrics(
            completion_tokens=tokens, ttft_s=ttft_s, total_s=total_s, tokens_per_s=tokens / total_s
        )

    turn = ReplayTurn(
        index=0,
        user_text="hi",
        original_text="a",
        replayed_text="a",
        similarity=1.0,
        original_metrics=metrics(2.0, 2.5),  # prompt computed: slow first token
        replayed_metrics=metrics(0.1, 0.35),  # prompt from the prefix cache
    )
    report = ReplayReport(
        source_conversation_id="s", conversation_id="c", leaf_node_id="n", turns=(turn,)
    )
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(report_table(report))
    text = out.getvalue()
    assert "first token" in text and "2.0 s / 0.10 s" in text
    assert "20.0 / 40.0" in text  # 10 tokens after the first, in 0.5 s and 0.25 s
    assert "4.4" not in text  # the prefill-diluted figure is gone


def test_conversations_new_switch_title_list(make_chat):
    h = make_chat(FakeEngine())
    h.run("/title alpha", "a")
    first = h.app.cursor.conversation_id
    h.run("/new beta", "b")
    assert h.app.cursor.conversation_id != first
    out = h.run("/list")
    assert "alpha" in out and "beta" in out
    h.run(f"/switch {first[:6]}")
    assert h.app.cursor.conversation_id == first
    assert "[alpha" in h.app.prompt_text()[0][1]


def test_errors_print_one_line_and_the_loop_goes_on(make_chat):
    h = make_chat(FakeEngine())
    out = h.run("/frobnicate", "/up", "/goto zzzz", "still here")
    assert "unknown command /frobnicate" in out
    assert "error:" in out
    assert "Traceback" not in out
    assert "echo: still here" in out
    out = h.run("/error")
    assert "Traceback" in out


def test_ambiguous_prefix_and_usage_errors(make_chat):
    h = make_chat(FakeEngine())
    out = h.run("/s")
    assert "ambiguous" in out
    out = h.run("/tools mode calculator")
    assert "usage: /tools mode" in out


def test_help_lists_commands_and_explains_one(make_chat):
    h = make_chat(FakeEngine())
    out = h.run("/help")
    for name in ("/fork", "/retry", "/replay", "/train", "/adapters", "/tools", "/quit"):
        assert name in out
    out = h.run("/help fork")
    assert "usage: /fork" in out and "new branch" in out
    out = h.run("/help tools scope")
    assert "add" in out and "pop" in out


def test_slash_slash_sends_a_message_starting_with_slash(make_chat):
    h = make_chat(FakeEngine())
    out = h.run("//etc/hosts is a file")
    assert "echo: /etc/hosts is a file" in out


def test_engine_commands_on_an_engine_without_them_fail_clearly(make_chat):
    h = make_chat(FakeEngine())
    out = h.run("/train start a data.jsonl", "/adapters", "/metrics")
    assert out.count("does not support") == 3


def test_prompt_preview_and_token_count(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)
    out = h.run("/system set Be brief.", "/prompt", "/tokens", "/tokens four words right here")
    # FakeEngine renders ChatML-like text and counts whitespace-separated words: the
    # prompt around the slot is "<tools>[...]</tools>", the system turn, the empty user
    # turn's header and footer, and the assistant header.
    system = {"role": "system", "content": "Be brief."}
    tools = h.app.cursor.request().tools
    prompt = engine.format_prompt(
        Request(messages=[system, {"role": "user", "content": "X"}], tools=tools)
    )
    before, _, after = prompt.partition("X")
    expected = engine.count_tokens(before) + engine.count_tokens(after)
    assert "Be brief." in out
    assert f"prompt ({expected} tokens + your message)" in out
    assert f"next prompt: {expected} tokens + your message" in out
    assert "4 tokens" in out  # "four words right here"


def test_counts_of_one_are_singular_in_the_footer_and_the_token_count(make_chat):
    h = make_chat(FakeEngine(["Yes."]))
    out = h.run("hi", "/tokens word")
    assert "1 token" in out  # the reply's footer and /tokens
    assert "1 tokens" not in out
    h = make_chat(FakeEngine(["Yes, two."]))
    assert "2 tokens" in h.run("hi")


def test_quit_and_eof_end_the_loop(make_chat):
    h = make_chat(FakeEngine())
    # /exit (an alias of /quit) ends the loop by itself: run() returns, no timeout.
    out = h.run("hi", "/exit", "never sent", quit=False, timeout=10)
    assert "echo: hi" in out and "never sent" not in out
    assert [t for t in turns(h.app) if t[0] == "user"] == [("user", "hi")]
    # Ctrl+D on an empty line ends it too; a loop that ignored it would hit the timeout
    # (TimeoutError) instead of returning.
    h.input.send_text("\x04")
    h.call(asyncio.wait_for(h.app.loop(), 10))
    # and the status main() returns after either is 0
    h.input.send_text("/quit\r")
    assert h.call(asyncio.wait_for(h.app.run_async(), 10)) == 0


@pytest.mark.parametrize("alias", ["/bottom", "/leaf"])
def test_navigation_up_down_leaf(make_chat, alias):
    h = make_chat(FakeEngine())
    h.run("one", "two")
    leaf = h.app.cursor.node_id
    h.run("/up 2")
    assert h.app.cursor.turn.text == "echo: one"
    h.run(alias)
    assert h.app.cursor.node_id == leaf
    h.run("/up", "/down")
    assert h.app.cursor.node_id == leaf


def test_ctrl_c_cancels_the_running_reply_and_the_repl_stays(make_chat):
    engine = FakeEngine(chunk_size=2)
    engine.script(FakeReply(text="x" * 2000, delay_s=0.01), "next one")
    h = make_chat(engine)
    started: list[float] = []

    def replying_for_a_while() -> bool:  # not a fixed delay: a loaded machine starts late
        if engine.in_flight and not started:
            started.append(time.monotonic())
        return bool(started) and time.monotonic() - started[0] > 0.3

    out = h.run("talk a lot", "after", interrupt_when=replying_for_a_while)
    assert out.count("cancelled") == 1  # the reply's footer says it; no second line
    assert "cancelled (partial reply kept)" in out
    assert "next one" in out  # the loop went on with the next line
    path = [n.turn for n in h.app.cursor.path() if n.turn is not None]
    cancelled = [t for t in path if t.role.value == "assistant" and t.cancelled]
    assert len(cancelled) == 1
    assert 0 < len(cancelled[0].text) < 2000  # the partial reply is kept


def test_completion_of_commands_subcommands_and_arguments(make_chat):
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    from mp13chat._completer import CommandCompleter

    h = make_chat(FakeEngine())
    completer = CommandCompleter(h.app)

    def complete(text):
        return [c.text for c in completer.get_completions(Document(text), CompleteEvent())]

    assert "/fork" in complete("/fo")
    assert set(complete("/tools ")) >= {"list", "mode", "scope", "approval"}
    assert complete("/tools mode calc") == ["calculator"]
    assert complete("/tools mode calculator s") == ["silent"]
    assert "add" in complete("/tools scope a")
    assert complete("/set temp") == ["temperature"]
    assert complete("/help tr") == ["train", "tree", "trim", "try"]
    assert complete("hello /fo") == []  # only lines that start with a command
    assert complete("/nosuch arg") == []


def test_a_wrapper_commands_completer_completes_and_a_broken_one_is_silent(make_chat):
    """A wrapper's completer that offered numbers raised AttributeError out of Tab."""
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    import mp13chat
    from mp13chat._completer import CommandCompleter

    def broken(repl, index, words):
        raise RuntimeError("no candidates today")

    level = mp13chat.command("level", usage="/level N", complete=lambda r, i, w: [1, 2, 10])
    moods = mp13chat.command("mood", usage="/mood M", complete=lambda r, i, w: ["calm", "cross"])
    h = make_chat(FakeEngine())
    h.app.register_command(level(lambda repl, line: None))
    h.app.register_command(
        mp13chat.group_command("feel", moods(lambda repl, line: None), group="x", doc=".")
    )
    h.app.register_command(
        mp13chat.command("odd", usage="/odd X", complete=broken)(lambda repl, line: None)
    )
    completer = CommandCompleter(h.app)

    def complete(text):
        return [c.text for c in completer.get_completions(Document(text), CompleteEvent())]

    assert complete("/lev") == ["/level"]
    assert complete("/level 1") == ["1", "10"]
    assert complete("/feel mood c") == ["calm", "cross"]
    assert complete("/odd ") == []


def test_alt_enter_makes_a_multi_line_message(make_chat):
    engine = FakeEngine()
    h = make_chat(engine)
    h.run("first line\x1b\rsecond line")  # Esc+Enter is what Alt+Enter sends
    assert turns(h.app)[0] == ("user", "first line\nsecond line")


def test_history_is_kept_in_a_file_next_to_the_config(make_chat, tmp_path):
    h = make_chat(FakeEngine())
    h.run("something to remember")
    assert "something to remember" in (tmp_path / "history").read_text()


def test_replay_flag_runs_at_start(make_chat, tmp_path):
    import asyncio

    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from mp13chat import ChatApp, ChatConfig

    h = make_chat(FakeEngine())
    h.run("/title original", "one")
    db = h.app.session.filename
    h.close()
    with create_pipe_input() as inp:
        app = ChatApp(
            ChatConfig(session=db),
            config_path=tmp_path / "config.json",
            engine=FakeEngine(),
            console=h.console,
            input=inp,
            output=DummyOutput(),
        )
        inp.send_text("/quit\r")
        assert asyncio.run(asyncio.wait_for(app.run_async(replay="original"), 30)) == 0
    assert "1/1 replies identical" in h.out.getvalue()


def test_tool_approvals_from_the_config(make_chat):
    h = make_chat(FakeEngine(), tool_approvals={"calculator": "deny"})
    assert h.app.toolbox.get("calculator").approval.value == "deny"


def test_tree_of_a_long_conversation_is_cut_above_the_cursor(make_chat):
    h = make_chat(FakeEngine())
    h.run(*[f"message {i}" for i in range(6)])
    out = h.run("/tree 3")
    assert "nodes above not shown" in out
    assert "user: message 5" in out and "user: message 0" not in out
    out = h.run("/tree all")
    assert "user: message 0" in out and "you are here" in out


def test_ctrl_c_stops_a_replay(make_chat):
    engine = FakeEngine(chunk_size=2)
    h = make_chat(engine)
    h.run("/title slow", "one", "two")
    engine.responder = lambda request: FakeReply(text="y" * 2000, delay_s=0.01)
    out = h.run("/replay slow", "/list", interrupt_after=0.5)
    assert "cancelled" in out
    assert "turn 1 of 2: one" in out  # where the replay was when it was stopped
    assert "replay of" in out  # the loop went on: /list shows the partial replay


def test_history_off_or_unwritable_keeps_it_in_memory_only(make_chat, tmp_path):
    h = make_chat(FakeEngine(), history=False)
    h.run("not kept")
    assert not (tmp_path / "history").exists()
    assert "not kept" in h.app._prompt.history.get_strings()  # Up still recalls it
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the config folder should be")
    again = make_chat(FakeEngine(), app_kwargs={"config_path": blocked / "config.json"})
    out = again.run("still chatting")
    assert "echo: still chatting" in out
    assert "still chatting" in again.app._prompt.history.get_strings()


def test_blank_lines_ctrl_c_while_typing_and_ctrl_d_at_a_question(make_chat):
    engine = FakeEngine()
    call = ToolCall("calculator", {"expression": "1+1"}, id="c1")
    engine.script(FakeReply(tool_calls=[call]), "not run then")
    h = make_chat(engine)
    h.app.toolbox.set_approval("calculator", "ask")
    # blank lines send nothing; Ctrl+D at the approval question answers no
    out = h.run("", "   ", "add", "\x04")
    assert "calculator: no" in out and "declined" in out
    tool_turn = [n.turn for n in h.app.cursor.path() if n.turn and n.turn.role.value == "tool"]
    assert tool_turn[0].tool_results[0].is_error
    assert engine.requests[0].messages[-1]["content"] == "add"  # the blanks sent nothing
    # Ctrl+C while typing drops the line, and the prompt comes back
    h.run("half typed\x03", "hi")
    users = [n.turn.text for n in h.app.cursor.path() if n.turn and n.turn.role.value == "user"]
    assert users == ["add", "hi"]


def test_open_a_new_session_file_starts_a_conversation_there(make_chat, tmp_path):
    h = make_chat(FakeEngine())
    h.run("in the old file")
    fresh = tmp_path / "fresh.db"
    h.run(f"/open {fresh}", "in the new file")
    assert h.app.session.filename == str(fresh)
    [only] = h.app.session.conversations()
    assert h.app.cursor.conversation_id == only.id
    assert turns(h.app) == [("user", "in the new file"), ("assistant", "echo: in the new file")]


def test_ids_typed_by_their_first_letters_and_long_titles_cut_at_a_word(make_chat):
    from collections import Counter

    h = make_chat(FakeEngine())
    h.run("Explain the difference between concurrency and parallelism in Python")
    info = h.app.session.conversation(h.app.cursor.conversation_id)
    assert info.title == "Explain the difference between concurrency and…"
    h.run(*[f"message {i}" for i in range(9)])  # 19 nodes: two ids share a first letter
    ids = [n.id for n in h.app.session.conversation_nodes(h.app.cursor.conversation_id)]
    letter, count = Counter(i[0] for i in ids).most_common(1)[0]
    assert count > 1
    out = h.run(f"/goto {letter}")
    assert f"node id '{letter}' is ambiguous (" in out and "type more of it" in out
    first_reply = ids[2]
    h.run(f"/goto {first_reply[:8]}")
    assert h.app.cursor.node_id == first_reply
    assert h.app.cursor.turn.text.startswith("echo: Explain")


def test_the_prompt_renders_even_when_the_session_cannot_say_where_we_are(make_chat):
    h = make_chat(FakeEngine())
    h.run("/title mine")
    assert h.app.prompt_text()[0][1].startswith("[mine @")
    h.app.session.close()  # e.g. closed under the REPL by a wrapper app's command
    assert h.app.prompt_text() == [("class:prompt.branch", ""), ("class:prompt", "> ")]


def test_prev_and_next_move_between_retries_with_a_setting_changed_in_between(make_chat):
    # /set before /retry puts the new reply under a placeholder carrying the setting,
    # beside the old reply: /prev said "no siblings; /retry makes another one" right
    # after a /retry, and the old reply could only be reached through /tree and /goto.
    engine = FakeEngine()
    engine.script("one", "two", "three")
    h = make_chat(engine)
    out = h.run("q", "/set temperature 0.5", "/retry", "/prev")
    assert "no siblings" not in out
    assert h.app.cursor.turn.text == "one"
    h.run("/next")
    assert h.app.cursor.turn.text == "two"
    out = h.run("/next")
    assert "this is the last of 2 siblings; /prev goes back" in " ".join(out.split())
    h.run("/retry")  # a third, under a placeholder of its own with the same setting
    assert h.app.cursor.turn.text == "three"
    h.run("/prev", "/prev")
    assert h.app.cursor.turn.text == "one"
    assert engine.requests[-1].temperature == 0.5  # the setting still applies to retries


def test_batch_replies_stay_readable_in_a_narrow_terminal(make_chat):
    # The replies were cells of a five-column table: at 40 columns the reply column was
    # a few letters wide and each reply ran down the screen one word per line.
    engine = FakeEngine()
    reply = "the quick brown fox jumps over the lazy dog " * 3
    engine.script(reply.strip(), reply.strip())
    h = make_chat(engine)
    h.console.width = 40
    out = h.run("/batch first question | second question")
    assert " ".join(out.split()).count(reply.strip()) == 2  # each reply whole, in order
    assert len(out.splitlines()) < 20  # was 70: a word or a part of one per line
    nodes = h.app.session.conversation_nodes(h.app.cursor.conversation_id)
    replies = [n for n in nodes if n.turn is not None and n.turn.role.value == "assistant"]
    assert len(replies) == 2
    for i, node in enumerate(sorted(replies, key=lambda n: n.seq), start=1):
        assert f"{i} {node.id[:6]} you: " in out  # which node to /goto, and its prompt
    assert "/goto NODE to continue one of them" in out


def test_history_shows_a_continued_reply_as_one_reply(make_chat):
    # /history printed the reply and its /continue as two replies, the first footer
    # still saying "truncated: /continue goes on" although it had been continued.
    engine = FakeEngine()
    engine.script(FakeReply(text="cut", finish_reason=FinishReason.LENGTH))
    h = make_chat(engine, markdown=False)
    h.run("long one", "/continue")
    out = h.run("/history")
    assert "cut (more)" in out  # one text, as the model sees it (/messages)
    assert "truncated" not in out
    assert out.count("first token") == 1  # one footer: how the whole reply ended
    assert out.index("you: long one") < out.index("cut (more)")


def _stuck_sqrt(n: int) -> int:
    raise ValueError(f"no square root of {n}")


def sqrt(n: int) -> int:
    """A square root that fails inside a helper.

    Args:
        n: the number
    """
    return _stuck_sqrt(n)


def test_error_after_a_failing_tool_shows_its_name_arguments_and_traceback(make_chat):
    engine = FakeEngine()
    call = ToolCall("sqrt", {"n": -4}, id="c1")
    engine.script(FakeReply(tool_calls=[call]), "No root.")
    h = make_chat(engine, app_kwargs={"tools": [sqrt]})
    assert "no error so far" in h.run("/error")
    out = h.run("root of -4?")
    # The panel shows what the model read, and says where the rest is.
    assert "Tool 'sqrt' failed: ValueError: no square root of -4" in out
    assert "/error shows the traceback" in out and "Traceback" not in out
    shown = h.run("/error")
    assert 'tool sqrt failed, called with {"n": -4} (call c1)' in shown
    assert "Traceback (most recent call last)" in shown
    assert "in _stuck_sqrt" in shown and "ValueError: no square root of -4" in shown
    # The model never saw the traceback.
    assert "Traceback" not in json.dumps(engine.requests[-1].messages)


def test_error_shows_the_newest_error_of_any_kind(make_chat):
    engine = FakeEngine()
    engine.script(FakeReply(tool_calls=[ToolCall("sqrt", {"n": -9}, id="c1")]), "No root.")
    h = make_chat(engine, app_kwargs={"tools": [sqrt]})
    h.run("/goto zzzz")  # a command's error first
    h.run("root of -9?")
    assert "ValueError: no square root of -9" in h.run("/error")  # then the tool's
    h.run("/goto zzzz")
    after = h.run("/error")
    assert "no square root" not in after and "Traceback" in after


def test_a_tool_result_without_traceback_gets_no_hint_and_keeps_the_last_error(make_chat):
    engine = FakeEngine()
    call = ToolCall("calculator", {"expression": "1+1"}, id="c1")
    engine.script(FakeReply(tool_calls=[call]), "2")
    h = make_chat(engine)
    out = h.run("1+1?")
    assert "/error shows the traceback" not in out
    assert "no error so far" in h.run("/error")
