# SPDX-License-Identifier: Apache-2.0
"""Training data: JSON / JSONL files or Python lists → validated ``Example`` values.

Accepted row shapes (exactly one per row):

* ``{"messages": [...], "tools": [...]?}`` — a chat in OpenAI shape: roles
  ``system``/``user``/``assistant``/``tool``, and the template-specific roles a
  request accepts (``_request_fields.ROLES``); assistant messages may carry
  ``tool_calls`` (``{"function": {"name", "arguments"}}``, arguments a dict or
  a JSON string) and tool messages a ``content`` result. It must contain at
  least one assistant message.
* ``{"prompt": "...", "completion": "..."}`` — raw text, no chat template.
* ``{"text": "..."}`` — raw text, all tokens in the loss.

Other keys are ignored (datasets carry ids and sources), except a near miss of a
key the row lacks (``"tool"`` for ``"tools"``, ``"contents"`` for ``"content"``),
refused as a typo: it would otherwise leave the tools or a turn out silently.

Invariant: every row is checked before training starts; the first bad row
raises ``DatasetError`` naming its index (and line for JSONL) and the shapes
accepted. Nothing here touches a model.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from mp13_engine._errors import DatasetError
from mp13_engine._request_fields import ROLES
from mp13_toolbox import ToolCall, did_you_mean

_SHAPES = (
    'each row must be {"messages": [...]} (chat), {"prompt": ..., "completion": ...} '
    'or {"text": ...}'
)


class ExampleKind(enum.Enum):
    """The shape of a training row."""

    MESSAGES = "messages"  # a chat, rendered with the chat template
    COMPLETION = "completion"  # raw prompt + completion
    TEXT = "text"  # raw text, all of it learned


@attrs.frozen(kw_only=True)
class Example:
    """One validated training row (the fields its ``kind`` uses)."""

    kind: ExampleKind
    messages: tuple[dict[str, Any], ...] = ()
    tools: tuple[dict[str, Any], ...] | None = None
    prompt: str = ""
    completion: str = ""
    text: str = ""


def read_rows(source: Any, what: str = "dataset") -> Iterable[tuple[str, Any]]:
    """Rows of a list or of a .json / .jsonl file, each with a label for error messages.

    A .jsonl file is read one line at a time as the rows are consumed, so a large one is
    never held whole in memory next to its parsed rows."""
    if isinstance(source, (list, tuple)):
        return [(f"row {i}", row) for i, row in enumerate(source)]
    path = Path(os.fspath(source)).expanduser()
    if not path.is_file():
        problem = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise DatasetError(
            f"The {what} file {str(path)!r} {problem}. Give the path of a .json or .jsonl "
            "file, or pass the rows as a Python list."
        )
    if path.suffix.lower() == ".jsonl":
        return _jsonl_rows(path, what)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _unreadable(path, what, exc) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{str(path)!r} is not valid JSON ({exc}). Use a JSON list of rows, or one row per "
            "line in a .jsonl file."
        ) from exc
    if isinstance(data, dict) and _is_one_row(data):
        raise DatasetError(
            f"{str(path)!r} holds one row, not a list of rows; put it in a list ([{{...}}]), "
            "or write one row per line in a .jsonl file."
        )
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise DatasetError(
                f"{str(path)!r} holds a JSON object; it must be a list of rows (or an object "
                "with exactly one list of rows)."
            )
        data = lists[0]
    if not isinstance(data, list):
        raise DatasetError(f"{str(path)!r} must hold a JSON list of rows; {_SHAPES}.")
    return [(f"{path.name} row {i}", row) for i, row in enumerate(data)]


def _unreadable(path: Path, what: str, exc: Exception, where: str = "") -> DatasetError:
    return DatasetError(
        f"cannot read the {what} file {str(path)!r}{where} ({exc.__class__.__name__}: {exc}); "
        "it must be UTF-8 JSON (.json) or JSON lines (.jsonl)"
    )


def _jsonl_rows(path: Path, what: str) -> Iterator[tuple[str, Any]]:
    """The rows of a .jsonl file, one line at a time (bytes, split on ``\\n`` only: a JSON
    string may hold U+2028, U+2029 or U+0085 as they are, which ``str.splitlines`` cut at)."""
    try:
        with path.open("rb") as lines:
            for lineno, raw in enumerate(lines, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise _unreadable(path, what, exc, f" at line {lineno}") from exc
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(
                        f"{path.name} line {lineno} is not valid JSON ({exc.msg}). Each line of "
                        "a .jsonl file must be one JSON object."
                    ) from exc
                yield f"{path.name} line {lineno}", row
    except OSError as exc:
        raise _unreadable(path, what, exc) from exc


def _is_one_row(data: dict[str, Any]) -> bool:
    """A row's own shape (its ``messages`` are message dicts, or it has text fields), which
    the one-list-of-rows rule would otherwise read as a list of rows (its messages)."""
    messages = data.get("messages")
    if isinstance(messages, list) and messages:
        return all(isinstance(m, dict) and "role" in m for m in messages)
    return any(isinstance(data.get(key), str) for key in ("prompt", "completion", "text"))


def _bad(label: str, problem: str) -> DatasetError:
    return DatasetError(f"{label}: {problem}; {_SHAPES}.")


def _misspelt(keys: Any, wanted: tuple[str, ...]) -> str:
    """``"'tool' (did you mean 'tools'?)"`` when one of ``keys`` is close to a ``wanted`` key
    the row lacks (a key close to one it has is another column, not a typo), else ``""``.

    The cutoff is stricter than ``did_you_mean``'s: datasets carry columns of their own
    (``"prompt_id"``, ``"source"``) that must not read as typos."""
    missing = [name for name in wanted if name not in keys]
    for key in keys:
        if isinstance(key, str) and key not in wanted:
            hint = did_you_mean(key, missing, cutoff=0.8)
            if hint:
                return f"{key!r}{hint}"
    return ""


def _check_messages(label: str, messages: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(messages, list) or not messages:
        raise _bad(label, '"messages" must be a non-empty list of {"role", "content"} objects')
    out = []
    for j, message in enumerate(messages):
        if not isinstance(message, dict):
            got = f"is a {type(message).__name__}, not an object"
            raise _bad(label, f'message {j} {got}; it needs a "role", one of {", ".join(ROLES)}')
        if message.get("role") not in ROLES:
            got = f"role {message['role']!r}" if "role" in message else "no role"
            raise _bad(label, f"message {j} has {got}; it needs a role, one of {', '.join(ROLES)}")
        content = message.get("content")
        calls = message.get("tool_calls")
        if content is not None and not isinstance(content, str):
            raise _bad(label, f"message {j} content must be a string")
        if content is None and not calls:
            typo = _misspelt(message, ("content", "tool_calls"))
            typo = f"; it has {typo}" if typo else ""
            raise _bad(label, f"message {j} has no content (and no tool_calls){typo}")
        if calls is not None:
            out.append({**message, "tool_calls": [_check_call(label, j, c) for c in calls]})
        else:
            out.append(dict(message))
    if not any(m["role"] == "assistant" for m in out):
        raise _bad(label, "a chat needs at least one assistant message to learn from")
    return tuple(out)


def _check_call(label: str, j: int, call: Any) -> dict[str, Any]:
    function = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise _bad(label, f'message {j}: a tool call needs {{"function": {{"name", "arguments"}}}}')
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        # Most chat templates render arguments with `tojson`, so they want a dict.
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise _bad(label, f"message {j}: tool call arguments are not valid JSON") from exc
    if not isinstance(arguments, dict):
        raise _bad(label, f"message {j}: tool call arguments must be an object")
    call_id = call.get("id") if isinstance(call, dict) else None
    return ToolCall(function["name"], arguments, call_id or None).to_openai()


def to_example(label: str, row: Any) -> Example:
    """Validate one row; raise DatasetError naming ``label`` when its shape is wrong."""
    if not isinstance(row, dict):
        raise _bad(label, f"got a {type(row).__name__}, not an object")
    if "messages" in row:
        typo = _misspelt(row, ("tools",))
        if typo:  # the tools would be left out of the rendered chat, silently
            raise _bad(label, f"unknown key {typo}")
        tools = row.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise _bad(label, '"tools" must be a list of function specs')
        return Example(
            kind=ExampleKind.MESSAGES,
            messages=_check_messages(label, row["messages"]),
            tools=tuple(tools) if tools else None,
        )
    if "prompt" in row or "completion" in row:
        prompt, completion = row.get("prompt"), row.get("completion")
        if not isinstance(prompt, str) or not isinstance(completion, str) or not completion:
            raise _bad(label, '"prompt" and a non-empty "completion" must both be strings')
        return Example(kind=ExampleKind.COMPLETION, prompt=prompt, completion=completion)
    if "text" in row:
        if not isinstance(row["text"], str) or not row["text"]:
            raise _bad(label, '"text" must be a non-empty string')
        return Example(kind=ExampleKind.TEXT, text=row["text"])
    raise _bad(label, f"unrecognised keys {sorted(row)}")


def load_examples(source: Any, what: str = "dataset") -> list[Example]:
    """All rows of ``source`` as examples; DatasetError for a missing/empty source or bad row."""
    # One row at a time: each parsed row is dropped once it is an Example.
    examples = [to_example(label, row) for label, row in read_rows(source, what)]
    if not examples:
        raise DatasetError(f"The {what} is empty; give at least one row. {_SHAPES}.")
    return examples


def split(
    examples: Sequence[Example], fraction: float, seed: int
) -> tuple[list[Example], list[Example]]:
    """(train, validation): a seeded random ``fraction`` held out (at least one row each)."""
    import random

    if fraction <= 0:
        return list(examples), []
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    n_val = max(1, round(len(examples) * fraction))
    if n_val >= len(examples):
        raise DatasetError(
            f"validation_split={fraction} leaves no training rows out of {len(examples)}; "
            "use a smaller fraction or more data."
        )
    held = set(order[:n_val])
    train = [e for i, e in enumerate(examples) if i not in held]
    val = [e for i, e in enumerate(examples) if i in held]
    return train, val
