# SPDX-License-Identifier: MIT
"""Command-line flags of ``mp13chat`` (argparse); ``--help`` explains them.

Flags override the config file for this run only; the file is never rewritten by flags.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import attrs

from mp13chat._config import FIELD_HELP


@attrs.frozen
class CliOptions:
    """The parsed flags; ``None`` means "not given: use the config file"."""

    model: str | None = None
    session: str | None = None
    replay: str | None = None
    config: str | None = None


def build_parser(prog: str = "mp13chat") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Chat with a local LLM: branching conversations, tools, LoRA adapters and "
            "training, saved sessions and replay. Type /help inside for the commands. "
            "With no model configured it starts on a built-in demo model (offline)."
        ),
        epilog=(
            "Config file: --config FILE, else $MP13_CONFIG_DIR/config.json, else "
            "~/.config/mp13/config.json (created with documented defaults on first run). "
            "Keys: Enter sends, Alt+Enter adds a line, Ctrl+C cancels a reply, "
            "Ctrl+D or /quit exits."
        ),
    )
    parser.add_argument("--model", metavar="PATH", help=FIELD_HELP["model"])
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
    return CliOptions(model=ns.model, session=ns.session, replay=ns.replay, config=ns.config)
