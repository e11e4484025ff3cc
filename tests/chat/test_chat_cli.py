# SPDX-License-Identifier: MIT
"""Command line, config file on first run, and wrapper-app tool registration."""

from __future__ import annotations

import asyncio
import json

import pytest

import mp13chat
from mp13chat import ChatApp, ChatConfig, UsageError
from mp13chat._cli import CliOptions, one_shot_question, parse_cli
from tests.chat._stdin import FakeStdin

FLAGS = (
    "--model",
    "--session",
    "--replay",
    "--config",
    "--device",
    "--dtype",
    "--quantize",
    "--system",
    "--max-new-tokens",
    "--threads",
    "--download",
    "--prompt",
    "--interactive",
)


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_cli(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for flag in FLAGS:
        assert flag in text
    assert "demo model" in text and "One-shot" in text
    # the statuses ChatApp.main returns (its docstring; tests below check 2 and 1)
    flat = " ".join(text.split())
    assert "Exit status: 0 done, 1 a failed start or one-shot answer, 2 bad flags" in flat
    assert "130 interrupted" in flat
    # The config file's JSON "null" is no flag value: `--model null` names a model "null".
    assert "null" not in text


def test_flags_parse():
    opts = parse_cli(["--model", "m", "--session", "s.db", "--replay", "abc", "--config", "c"])
    assert opts == CliOptions(model="m", session="s.db", replay="abc", config="c")
    opts = parse_cli(
        [
            *("--device", "cpu", "--dtype", "bfloat16", "--quantize", "4bit"),
            *("--system", "Be brief.", "--max-new-tokens", "64", "--download"),
            *("-p", "hi"),
        ]
    )
    assert opts == CliOptions(
        device="cpu",
        dtype="bfloat16",
        quantize="4bit",
        system="Be brief.",
        max_new_tokens=64,
        download=True,
        prompt="hi",
    )


@pytest.mark.parametrize(
    "argv",
    [["--quantize", "3bit"], ["--dtype", "float8"], ["--max-new-tokens", "0"], ["--threads", "0"]],
)
def test_bad_flag_values_are_refused_by_the_parser(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_cli(argv)
    assert exit_.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_flags_override_the_config_for_this_run():
    config = ChatConfig(
        engine={"max_batch_size": 4, "device": "cuda"},
        params={"max_new_tokens": 256, "temperature": 0.5},
        system="From the file.",
    )
    opts = parse_cli(
        [
            *("--device", "cpu", "--dtype", "float32", "--quantize", "8bit", "--download"),
            *("--system", "From the flag.", "--max-new-tokens", "32"),
        ]
    )
    applied = opts.apply(config)
    assert applied.engine == {
        "max_batch_size": 4,
        "device": "cpu",
        "dtype": "float32",
        "quantization": "8bit",
        "download": True,
    }
    assert applied.params == {"max_new_tokens": 32, "temperature": 0.5}
    assert applied.system == "From the flag."
    assert config.engine == {"max_batch_size": 4, "device": "cuda"}  # unchanged
    assert parse_cli([]).apply(config) == config


def test_engine_flags_reach_engine_load(tmp_path, monkeypatch):
    """--device/--dtype/--quantize/--download become the fields Engine.load builds its
    EngineConfig from (``download`` is the real lane's EngineConfig field)."""
    from mp13_engine import Engine, EngineConfig

    seen = {}

    class Stop(Exception):
        pass

    def fake_load(model, **fields):
        seen.update(fields, model=model)
        raise Stop

    monkeypatch.setattr(Engine, "load", staticmethod(fake_load))
    monkeypatch.setenv("MP13_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("MP13_CACHE", str(tmp_path / "cache"))
    app = ChatApp()
    app.apply_options(
        parse_cli(
            [
                *("--model", "tiny", "--device", "cpu", "--dtype", "float32"),
                *("--quantize", "4bit", "--download"),
            ]
        )
    )
    with pytest.raises(Stop):
        asyncio.run(app.start())
    assert seen["device"] == "cpu" and seen["dtype"] == "float32"
    assert seen["quantization"] == "4bit" and seen["download"] is True
    assert seen["adapters_dir"] == str(tmp_path / "adapters")
    fields = {k: v for k, v in seen.items() if k not in ("model", "download")}
    config = EngineConfig.from_dict({"model": seen["model"], **fields})
    assert (config.device, config.dtype, config.quantization) == ("cpu", "float32", "4bit")
    if "download" in EngineConfig.field_names():  # once the real lane's field is merged
        assert EngineConfig.from_dict({"model": "m", "download": True}).download is True


def test_one_shot_question_from_the_flag_stdin_or_both():
    terminal = FakeStdin(tty=True)
    assert one_shot_question(parse_cli([]), terminal) is None  # the REPL
    assert one_shot_question(parse_cli(["-p", "hi"]), terminal) == "hi"
    assert one_shot_question(parse_cli([]), FakeStdin("piped in\n")) == "piped in"
    assert one_shot_question(parse_cli(["-p", "-"]), FakeStdin("from stdin")) == "from stdin"
    both = one_shot_question(parse_cli(["-p", "summarize:"]), FakeStdin("some text"))
    assert both == "summarize:\n\nsome text"
    assert one_shot_question(parse_cli(["-p", "hi"]), None) == "hi"
    # -i keeps the REPL on piped input (commands are read from it)
    assert one_shot_question(parse_cli(["-i"]), FakeStdin("/tools\n")) is None


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["-p", ""], "", "nothing to ask"),
        ([], "   \n", "nothing to ask"),
        (["-p", "hi", "--replay", "x"], "", "--replay"),
        (["-p", "hi", "-i"], "", "-i keeps the REPL"),
    ],
)
def test_one_shot_usage_errors(argv, stdin, message):
    with pytest.raises(UsageError, match=message):
        one_shot_question(parse_cli(argv), FakeStdin(stdin))


def test_first_run_creates_the_config_and_flags_override_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MP13_CONFIG_DIR", str(tmp_path))
    app = ChatApp()
    app.apply_options(CliOptions(model="some/model"))
    assert (tmp_path / "config.json").exists()
    assert app.config.model == "some/model"
    # the file keeps its own value: flags are for this run only
    assert json.loads((tmp_path / "config.json").read_text())["model"] is None


def test_explicit_config_file(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"stream": False, "system": "Hi."}))
    app = ChatApp()
    app.apply_options(CliOptions(config=str(path)))
    assert app.config.stream is False and app.config.system == "Hi."
    assert app.config_dir == tmp_path


def test_a_wrapper_apps_config_is_what_main_starts_with(tmp_path, monkeypatch):
    """ChatApp(ChatConfig(...)).main() used to read the config file instead and drop the
    wrapper's defaults (its system message, builtin_tools=False) without a word."""
    monkeypatch.setenv("MP13_CONFIG_DIR", str(tmp_path / "shared"))
    given = ChatConfig(system="You are Wrapper.", builtin_tools=False)
    app = ChatApp(given, config_path=tmp_path / "app" / "config.json")
    app.apply_options(parse_cli([]))
    assert app.config == given
    assert app.config_dir == tmp_path / "app"  # history, session, log: the wrapper's folder
    assert not (tmp_path / "app" / "config.json").exists()  # no file was read or written
    assert not (tmp_path / "shared").exists()
    assert app.config_source == "the app's ChatConfig, no file read"  # /config's title
    app.apply_options(parse_cli(["--system", "From the flag."]))  # flags still apply on top
    assert app.config.system == "From the flag." and app.config.builtin_tools is False
    assert app.config_source == "the app's ChatConfig, no file read + command-line flags"


def test_a_wrapper_apps_config_path_is_the_file_main_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("MP13_CONFIG_DIR", str(tmp_path / "shared"))
    path = tmp_path / "app" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"stream": False}))
    app = ChatApp(config_path=path)
    app.apply_options(parse_cli([]))
    assert app.config.stream is False and app.config_path == path
    assert app.config_source == str(path)
    assert not (tmp_path / "shared").exists()
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ChatApp(config_path="~/app/config.json").config_path == path  # as README writes it


def test_config_flag_names_the_file_even_when_the_wrapper_gave_a_config(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"system": "From the file."}))
    app = ChatApp(ChatConfig(system="You are Wrapper."))
    app.apply_options(CliOptions(config=str(path)))
    assert app.config.system == "From the file." and app.config_path == path


def test_bad_config_file_exits_with_a_clear_message(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"colour": "red"}))
    assert ChatApp().main(["--config", str(path)]) == 2
    assert "colour" in capsys.readouterr().err


def wrapper_lookup(word: str) -> str:
    """Look a word up in the wrapper app's glossary.

    Args:
        word: The word.
    """
    return word.upper()


mp13chat.register_tool(wrapper_lookup, risk="medium")


def _capture_app(monkeypatch) -> dict:
    seen: dict = {}

    def fake_main(self, argv=None):
        seen["app"] = self
        seen["argv"] = argv
        return 0

    monkeypatch.setattr(ChatApp, "main", fake_main)
    return seen


def test_main_registers_exactly_the_tools_it_is_given_with_their_options(monkeypatch):
    seen = _capture_app(monkeypatch)

    def extra() -> str:
        """An extra tool."""
        return "x"

    assert mp13chat.main(["--model", "tiny"], tools=[extra, wrapper_lookup]) == 0
    pending = seen["app"].take_pending_tools()
    assert [r.func for r in pending] == [extra, wrapper_lookup]
    assert pending[1].options == {"risk": "medium"}
    assert seen["argv"] == ["--model", "tiny"]


def test_main_does_not_pick_up_tools_from_its_callers_namespace(monkeypatch):
    # wrapper_lookup is marked and bound in this module, which calls main(): an app
    # registers only what it is handed (issue 14: no reading the caller's globals).
    seen = _capture_app(monkeypatch)
    assert mp13chat.main([]) == 0
    assert seen["app"].take_pending_tools() == []


def test_main_has_no_frame_inspection():
    import inspect

    source = inspect.getsource(mp13chat)
    assert "_getframe" not in source and "f_globals" not in source


def test_registered_tools_reach_the_toolbox(make_chat):
    from mp13_context.testing import FakeEngine

    h = make_chat(FakeEngine(), app_kwargs={"tools": [wrapper_lookup]})
    assert "wrapper_lookup" in h.app.toolbox
    h.app.register_tool(lambda: "late", name="late_tool")
    assert "late_tool" in h.app.toolbox
    assert h.app.toolbox.get("wrapper_lookup").risk.value == "medium"
    # after start, a misspelt option is the same ChatError as before (was a bare TypeError)
    with pytest.raises(mp13chat.ChatError, match="unexpected keyword argument 'riks'; the options"):
        h.app.register_tool(lambda: "x", name="other", riks="high")
    assert "other" not in h.app.toolbox


def test_public_names_are_pinned():
    assert mp13chat.__all__ == [
        "ChatApp",
        "ChatConfig",
        "ChatConfigError",
        "ChatConfigKeywordError",
        "ChatError",
        "Command",
        "CommandLine",
        "CommandRegistry",
        "Repl",
        "ToolRegistration",
        "UnknownCommandError",
        "UsageError",
        "command",
        "default_config_path",
        "group_command",
        "load_config",
        "main",
        "register_tool",
    ]
    assert all(hasattr(mp13chat, name) for name in mp13chat.__all__)


def test_a_max_new_tokens_that_is_no_number_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_cli(["--max-new-tokens", "many"])
    assert exit_.value.code == 2
    assert "--max-new-tokens: expected a whole number, got 'many'" in capsys.readouterr().err


def test_stdin_for_a_one_shot_question_must_exist_and_need_not_be_a_file():
    with pytest.raises(UsageError, match="-p - reads the question from standard input, but"):
        one_shot_question(parse_cli(["-p", "-"]), None)

    class Reader:  # a stream without isatty (a wrapper's own object) counts as piped
        def read(self) -> str:
            return "from a reader"

    assert one_shot_question(parse_cli([]), Reader()) == "from a reader"


def test_threads_are_set_before_the_model_loads(tmp_path, monkeypatch):
    """Was: mp13chat left torch's default of one thread per core, which on a machine whose
    cores are busy runs every reply far slower than one thread; the only cure was
    OMP_NUM_THREADS in the environment. --threads N (the config's threads) sets it."""
    import torch

    from mp13_engine import Engine

    monkeypatch.setenv("MP13_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("MP13_CACHE", str(tmp_path / "cache"))
    before = torch.get_num_threads()
    wanted = 2 if before != 2 else 3
    seen = []

    class Stop(Exception):
        pass

    def fake_load(model, **fields):
        seen.append(torch.get_num_threads())
        raise Stop

    monkeypatch.setattr(Engine, "load", staticmethod(fake_load))
    try:
        app = ChatApp()
        app.apply_options(parse_cli(["--model", "tiny", "--threads", str(wanted)]))
        assert app.config.threads == wanted
        with pytest.raises(Stop):
            asyncio.run(app.start())
        assert seen == [wanted]
        # The config file's field does the same; without it torch's default stays.
        torch.set_num_threads(before)
        config = tmp_path / "other.json"
        config.write_text(json.dumps({"model": "tiny", "threads": 1}))
        app = ChatApp()
        app.apply_options(parse_cli(["--config", str(config)]))
        with pytest.raises(Stop):
            asyncio.run(app.start())
        assert seen == [wanted, 1]
        torch.set_num_threads(before)
        app = ChatApp(ChatConfig(model="tiny"))
        app.apply_options(parse_cli([]))
        with pytest.raises(Stop):
            asyncio.run(app.start())
        assert seen == [wanted, 1, before]
    finally:
        torch.set_num_threads(before)
