# SPDX-License-Identifier: MIT
"""The user config file of ``mp13chat``: JSON, documented fields, created on first run.

Where it lives (first match wins):

1. ``--config FILE`` on the command line;
2. ``$MP13_CONFIG_DIR/config.json``;
3. ``$XDG_CONFIG_HOME/mp13/config.json``, else ``~/.config/mp13/config.json``.

The folder of the config file also holds the prompt history (``history``), the
default session database (``chats.db``), the adapters trained in the REPL
(``adapters/``) and the log of library warnings (``mp13chat.log``), so pointing
``MP13_CONFIG_DIR`` at a temporary folder isolates everything (tests do this). A
missing file is written with the defaults and a ``_help`` object that documents every
field; keys starting with ``_`` are ignored on load, unknown keys are an error that
names them. ``ChatConfig`` is a frozen value:
command-line flags produce a new one with ``attrs.evolve``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
import cattrs

from mp13_context import PARAMS
from mp13_engine import REQUEST_FIELDS, EngineConfig, Request, RequestError
from mp13_toolbox import Approval, Mp13Error, did_you_mean, strict_keywords
from mp13chat._convert import make_converter
from mp13chat._errors import ChatConfigError, ChatConfigKeywordError

CONFIG_FILENAME = "config.json"

#: Special values of ``model``: built-in models that need no download.
DEMO_MODEL = "demo"
TINY_MODEL = "tiny"

#: Help text of every field; written into a new config file under ``_help``.
FIELD_HELP: dict[str, str] = {
    "model": (
        "Model to load: a local folder, a named real model mp13 fetches once on first use "
        "(e.g. 'smollm2-135m'), or a hub id (from the local cache; --download fetches it). "
        "null or 'demo' = the built-in demo model (ships with mp13, trained offline from its "
        "code); 'tiny' = a random tiny model (fast, gibberish)."
    ),
    "engine": (
        "Extra EngineConfig fields passed to Engine.load, e.g. "
        '{"device": "cpu", "dtype": "float32", "quantization": null, "max_batch_size": 8}. '
        "adapters_dir defaults to the 'adapters' folder next to this file: /train saves "
        "there, and every adapter in it made for the loaded model is loaded at start."
    ),
    "session": (
        "SQLite session file; null = chats.db next to this config file; ':memory:' = keep nothing."
    ),
    "system": "System message set on every new conversation (null = the template's default).",
    "params": (
        "Generation parameters set on every new conversation, e.g. "
        '{"max_new_tokens": 256, "temperature": 0.7, "do_sample": true}.'
    ),
    "stream": "Print replies token by token as they are generated.",
    "markdown": "Render replies as markdown (streamed ones too, when on a terminal).",
    "show_reasoning": "Show the model's reasoning (dimmed) when it produces any.",
    "builtin_tools": "Offer the toolbox's builtin tools (calculator, current_time, ...).",
    "history": "Keep the prompt history in a file next to this config file.",
    "warm_prefix_cache": (
        "Right after the model loads, and after a command that changes it (/system, "
        "/tools, /adapters, /new, /switch, /open), compute what comes before the next "
        "question (system prompt, tools' descriptions, a loaded conversation) into the "
        "engine's prefix cache in the background, so the next reply starts sooner; a "
        "question typed meanwhile waits for it. Off when the engine's prefix_cache_mb is 0."
    ),
    "threads": (
        "CPU threads torch computes with (torch.set_num_threads, set before the model "
        "loads); null = torch's default, one per core. On a machine whose cores are busy "
        "with other work, 1 (or the number of idle cores) is much faster."
    ),
    "tool_approvals": (
        "Approval policy per tool: allow / deny / ask, e.g. "
        '{"calculator": "ask"}. Unlisted tools follow their risk level (low: allow, '
        "medium and high: ask). While this is empty, the demo model's REPL asks before "
        "every builtin (a one-shot -p run cannot ask, so unlisted tools follow their risk)."
    ),
}


def _dict(value: Any) -> dict[str, Any]:
    return dict(value) if value is not None else {}


def _is_bool(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    # "no" or 0 would otherwise be taken as on and off without a word.
    if not isinstance(value, bool):
        raise ChatConfigError(f"ChatConfig.{attribute.name} is True or False, not {value!r}")


def _is_threads(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return
    raise ChatConfigError(
        f"ChatConfig.{attribute.name} is a number of threads of at least 1 (or null for "
        f"torch's default), not {value!r}"
    )


@strict_keywords(ChatConfigKeywordError)
@attrs.frozen(kw_only=True)
class ChatConfig:
    """What the REPL starts with. Every field is documented in ``FIELD_HELP``.

    Checked when made, by the rules the config file is checked by (a wrapper app's
    ``ChatConfig(params={"temprature": 0.5})`` is a ``ChatConfigError`` naming the field,
    not a failed start): on/off fields are bools, ``engine`` names ``EngineConfig``
    fields, ``params`` valid parameters, ``tool_approvals`` allow / deny / ask.
    """

    model: str | None = None
    engine: dict[str, Any] = attrs.field(factory=dict, converter=_dict, hash=False)
    session: str | None = None
    system: str | None = None
    params: dict[str, Any] = attrs.field(
        factory=lambda: {"max_new_tokens": 256}, converter=_dict, hash=False
    )
    stream: bool = attrs.field(default=True, validator=_is_bool)
    markdown: bool = attrs.field(default=True, validator=_is_bool)
    show_reasoning: bool = attrs.field(default=True, validator=_is_bool)
    builtin_tools: bool = attrs.field(default=True, validator=_is_bool)
    history: bool = attrs.field(default=True, validator=_is_bool)
    warm_prefix_cache: bool = attrs.field(default=True, validator=_is_bool)
    threads: int | None = attrs.field(default=None, validator=_is_threads)
    tool_approvals: dict[str, str] = attrs.field(factory=dict, converter=_dict, hash=False)

    def __attrs_post_init__(self) -> None:
        problems = _entry_problems(self)
        if problems:
            raise ChatConfigError(f"ChatConfig: {'; '.join(problems)}")


def default_config_path(environ: dict[str, str] | None = None) -> Path:
    """The config file used when ``--config`` is not given (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get("MP13_CONFIG_DIR"):
        return Path(env["MP13_CONFIG_DIR"]).expanduser() / CONFIG_FILENAME
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "mp13" / CONFIG_FILENAME


def config_to_json(config: ChatConfig) -> dict[str, Any]:
    """The JSON object of ``config`` plus the ``_help`` block."""
    data = make_converter().unstructure(config)
    return {"_help": dict(FIELD_HELP), **data}


def load_config(path: Path, *, create: bool = True) -> ChatConfig:
    """Read ``path``; when it does not exist, write the defaults there first (if ``create``)."""
    path = Path(path)
    if not path.exists():
        config = ChatConfig()
        if create:
            save_config(config, path)
        return config
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ChatConfigError(
            f"cannot read the config file {path}: {exc}. Fix the JSON or delete the file "
            "to get a fresh one with the defaults."
        ) from exc
    if not isinstance(data, dict):
        raise ChatConfigError(f"the config file {path} must hold a JSON object, not {data!r}")
    fields = {k: v for k, v in data.items() if not k.startswith("_")}
    try:
        config = make_converter().structure(fields, ChatConfig)
    except Exception as exc:
        own = _own_check(exc)
        if own is not None:  # ChatConfig's own checks (see its docstring)
            detail = str(own).removeprefix("ChatConfig: ")
            raise ChatConfigError(f"bad config file {path}: {detail}") from exc
        details = "; ".join(cattrs.transform_error(exc))
        known = ", ".join(FIELD_HELP)
        raise ChatConfigError(
            f"bad config file {path}: {details or exc}. Known fields: {known}."
        ) from exc
    return config


def _own_check(exc: BaseException) -> ChatConfigError | None:
    """The ``ChatConfigError`` of ChatConfig's own checks, if cattrs' error group holds one."""
    if isinstance(exc, ChatConfigError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _own_check(inner)
        if found is not None:
            return found
    return None


def _entry_problems(config: ChatConfig) -> list[str]:
    """What is wrong inside ``engine``, ``params`` and ``tool_approvals``, by the rules the
    libraries apply at start: a typo there names the file instead of failing the start."""
    problems = []
    known = EngineConfig.field_names()
    unknown = sorted(set(config.engine) - set(known))
    if unknown:
        named = ", ".join(f"{n}{did_you_mean(str(n), known)}" for n in unknown)
        problems.append(f"engine: unknown EngineConfig field(s) {named}")
    for name, value in config.params.items():
        check = PARAMS.get(name)
        if check is None:
            hint = f"{did_you_mean(str(name), PARAMS)} (known: {', '.join(PARAMS)})"
            problems.append(f"params: unknown parameter {name!r}{hint}")
            continue
        try:
            if value is not None:
                check(name, value)
        except Mp13Error as exc:
            problems.append(f"params: {exc}")
    if not problems:  # each value is fine: do they go together (top_logprobs needs logprobs)?
        fields = {n: v for n, v in config.params.items() if n in REQUEST_FIELDS and v is not None}
        try:
            Request(prompt="x", **fields)
        except RequestError as exc:
            problems.append(f"params: {exc}")
    policies = [a.value for a in Approval]
    for tool, policy in config.tool_approvals.items():
        if policy not in policies:
            problems.append(
                f"tool_approvals: {tool}: {policy!r} is not one of {', '.join(policies)}"
            )
    return problems


def save_config(config: ChatConfig, path: Path) -> None:
    """Write ``config`` (with its ``_help`` block) to ``path``, creating the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(config_to_json(config), indent=2, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")
