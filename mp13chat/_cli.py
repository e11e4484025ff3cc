# SPDX-License-Identifier: MIT
"""Command-line flags of ``mp13chat`` (argparse); ``--help`` explains them.

Flags override the config file for this run only; the file is never rewritten by flags.
``CliOptions.apply`` turns them into the ``ChatConfig`` of the run (engine flags go into
``ChatConfig.engine``, i.e. the ``EngineConfig`` fields the model is loaded with).

One-shot mode (``one_shot_question``): ``-p TEXT`` answers TEXT and exits; ``-p -``
reads the question from standard input, and so does a plain ``mp13chat`` whose input
is piped (``echo hi | mp13chat``), as ``ollama run`` and ``llm`` do. ``-p TEXT`` with
piped input asks TEXT followed by that input (``cat notes.md | mp13chat -p
"summarize:"``). ``-i`` keeps the REPL even when the input is piped (it then reads
commands from the pipe, one per line).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import IO, Any

import attrs

from mp13chat._config import ChatConfig
from mp13chat._errors import UsageError
from mp13chat._terminal import is_terminal

DTYPES = ("auto", "float32", "bfloat16", "float16")
QUANTIZATIONS = ("4bit", "8bit")
STDIN = "-"
#: Flags that set an ``EngineConfig`` field (``ChatConfig.engine``): flag -> field.
ENGINE_FLAGS = {
    "device": "device",
    "dtype": "dtype",
    "quantize": "quantization",
    "download": "download",
}


@attrs.frozen(kw_only=True)
class CliOptions:
    """The parsed flags; ``None`` means "not given: use the config file"."""

    model: str | None = None
    session: str | None = None
    replay: str | None = None
    config: str | None = None
    device: str | None = None
    dtype: str | None = None
    quantize: str | None = None
    system: str | None = None
    max_new_tokens: int | None = None
    threads: int | None = None
    download: bool = False
    prompt: str | None = None
    interactive: bool = False

    def apply(self, config: ChatConfig) -> ChatConfig:
        """``config`` with these flags applied (a new value; ``config`` is unchanged)."""
        # A flag left out is None (False for --download): the config file's value stays.
        given = {k: v for k, v in attrs.asdict(self).items() if v is not None and v is not False}
        changes: dict[str, Any] = {
            k: given[k] for k in ("model", "session", "system", "threads") if k in given
        }
        engine = {**config.engine, **{f: given[k] for k, f in ENGINE_FLAGS.items() if k in given}}
        if engine != config.engine:
            changes["engine"] = engine
        if self.max_new_tokens is not None:
            changes["params"] = {**config.params, "max_new_tokens": self.max_new_tokens}
        return attrs.evolve(config, **changes)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value}")
    return value


def build_parser(prog: str = "mp13chat") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Chat with a local LLM: branching conversations, tools, LoRA adapters and "
            "training, saved sessions and replay. Type /help inside for the commands. "
            "With no model configured it starts on the built-in demo model (offline; it "
            "ships with mp13)."
        ),
        epilog=(
            "One-shot: 'mp13chat -p QUESTION' prints the answer and exits (status 1 on an "
            "error); piped input is read as the question ('echo hi | mp13chat', "
            "'mp13chat -p -'), or appended to -p TEXT. "
            "Config file: --config FILE, else $MP13_CONFIG_DIR/config.json, else "
            "$XDG_CONFIG_HOME/mp13/config.json, else ~/.config/mp13/config.json (created "
            "with documented defaults on first run). "
            "Keys: Enter sends, Alt+Enter adds a line, Ctrl+C cancels a reply, "
            "Ctrl+D or /quit exits. "
            "Exit status: 0 done, 1 a failed start or one-shot answer, 2 bad flags or a "
            "bad config file, 130 interrupted (Ctrl+C while starting or answering once)."
        ),
    )
    # Not FIELD_HELP's text: its "null" is JSON, and `--model null` is a model named null.
    parser.add_argument(
        "--model",
        metavar="PATH|NAME",
        help="Model to load: a local folder, a named real model mp13 fetches once on first "
        "use (e.g. 'smollm2-135m'), or a hub id (from the local cache; --download fetches "
        "it). 'demo' = the built-in demo model (ships with mp13, trained offline from its "
        "code; the default when neither this flag nor the config's 'model' names one); "
        "'tiny' = a random tiny model (fast, gibberish).",
    )
    parser.add_argument(
        "-p",
        "--prompt",
        metavar="TEXT",
        help="One-shot: answer TEXT, print the answer and exit ('-' reads the question "
        "from standard input). Records nothing unless --session is given.",
    )
    parser.add_argument(
        "-i",
        "--interactive",
        action="store_true",
        help="Run the REPL even when the input is piped (commands are then read from it).",
    )
    parser.add_argument(
        "--system",
        metavar="TEXT",
        help="System message set on every new conversation (without it: the config's "
        "'system', else the chat template's default).",
    )
    parser.add_argument(
        "--max-new-tokens",
        metavar="N",
        type=_positive,
        help="Longest reply in tokens (the 'max_new_tokens' of the config's 'params').",
    )
    parser.add_argument(
        "--device",
        metavar="DEVICE",
        help="Where the model runs: auto (a GPU when there is one, else the CPU), cpu, "
        "cuda, cuda:N or mps.",
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        help="Weight precision (auto: float32 on the CPU, the checkpoint's own on a GPU).",
    )
    parser.add_argument(
        "--threads",
        metavar="N",
        type=_positive,
        help="CPU threads torch computes with (set before the model loads; the config's "
        "'threads'). torch's default is one per core, which on a machine whose cores are "
        "busy with other work is much slower than 1.",
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        help="Load the weights quantized with bitsandbytes: less memory, not faster on a CPU.",
    )
    parser.add_argument(
        "--download",
        action="store_true",
        help="Allow downloading a --model hub id that is not in the local Hugging Face "
        "cache (offline is the default).",
    )
    parser.add_argument(
        "--session",
        metavar="FILE",
        help="SQLite session file to open (created if missing); overrides the config's "
        "'session'. ':memory:' keeps nothing.",
    )
    parser.add_argument(
        "--replay",
        metavar="CONV",
        help="At start, replay conversation CONV (an id or unique id prefix or title of the "
        "session) into a new conversation on the loaded model and show the comparison.",
    )
    parser.add_argument("--config", metavar="FILE", help="Config file to use (JSON).")
    return parser


def parse_cli(argv: Sequence[str] | None) -> CliOptions:
    """Parse ``argv`` (``None``: ``sys.argv[1:]``); ``--help`` exits with status 0."""
    ns = build_parser().parse_args(argv)
    return CliOptions(**vars(ns))


def one_shot_question(options: CliOptions, stdin: IO[str] | None) -> str | None:
    """The question of a one-shot run, or ``None`` for the REPL (see the module docstring).

    ``stdin`` is the process's standard input (``None`` when there is none). Raises
    ``UsageError`` for an empty question or a one-shot run combined with ``--replay``.
    """
    piped = stdin is not None and not is_terminal(stdin) and not options.interactive
    if options.prompt is None and not piped:
        return None
    if options.interactive and options.prompt is not None:
        raise UsageError("-p answers once and exits, -i keeps the REPL: give one of them")
    if options.replay is not None:
        raise UsageError("--replay runs in the REPL; leave out -p and piped input")
    parts: list[str] = []
    if options.prompt not in (None, STDIN):
        parts.append(options.prompt)
    if options.prompt == STDIN or piped:
        if stdin is None:
            raise UsageError("-p - reads the question from standard input, but there is none")
        parts.append(stdin.read())
    question = "\n\n".join(p.strip() for p in parts if p.strip())
    if not question:
        raise UsageError(
            "nothing to ask: -p needs a question (mp13chat -p 'what is 17*23?'), "
            "and piped input was empty"
        )
    return question
