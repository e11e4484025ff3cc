# SPDX-License-Identifier: Apache-2.0
"""Messages going back to the model, in the shape each format's chat template expects.

Canonical input (OpenAI-shaped): an assistant message with ``tool_calls``
``[{"id", "type": "function", "function": {"name", "arguments": dict}}]`` and
tool results ``{"role": "tool", "tool_call_id", "name", "content"}``.
``prepare_messages`` adapts them per the profile's ``MessageStyle``: arguments
as a JSON object or JSON text, call ids rewritten to what the template accepts
(Mistral: 9 alphanumerics, the same mapping for the call and its result),
calls written into the content for templates that ignore ``tool_calls`` (or
take fewer calls per message than given), the tool role renamed where the
template wants another name (unless the given template maps role "tool"
itself), and consecutive results merged into one message where the template
demands strictly alternating turns. Given the template's probed
``TemplateSupport``, calls it would drop go into the content and results it
would drop into user turns. ``prepare_chat`` does all of it and places the
tool specs (``tools=``, a system-message field, or the documented
``tools_system_prompt`` block after the template's default system prompt).
The input is never modified, and nothing in a chat is ever silently dropped.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from mp13_engine._errors import ToolFormatError
from mp13_engine.toolcalls._kimi_k2 import kimi_id
from mp13_engine.toolcalls._raw_values import raw_text
from mp13_engine.toolcalls._registry import get_profile
from mp13_engine.toolcalls._template import TemplateSupport
from mp13_engine.toolcalls._types import require_list, require_text
from mp13_engine.toolcalls._values import (
    PayloadError,
    ToolLike,
    arguments_object,
    dumps,
    tool_list,
)
from mp13_toolbox import ToolCall, ToolSpec

_ALNUM = string.ascii_letters + string.digits


def mistral_id(call_id: str | None, index: int) -> str:
    """A 9-character alphanumeric id: kept if already one, else derived deterministically."""
    if call_id and len(call_id) == 9 and call_id.isalnum() and call_id.isascii():
        return call_id
    seed = call_id if call_id else f"call-{index}"
    digest = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    out = []
    for _ in range(9):
        digest, r = divmod(digest, len(_ALNUM))
        out.append(_ALNUM[r])
    return "".join(out)


#: Id rewriting per ``MessageStyle.ids``: (call, running index) -> id the template accepts.
ID_STYLES = MappingProxyType(
    {
        "mistral9": lambda call, index: mistral_id(call.id, index),
        "kimi": kimi_id,
    }
)


_CALL_SHAPE = "{'type': 'function', 'id': ..., 'function': {'name': ..., 'arguments': {...}}}"


def _calls(value: Any, at: int) -> list[ToolCall]:
    """Message ``at``'s ``tool_calls`` as ``ToolCall`` values.

    A call the chat cannot be rendered from faithfully is a ``ToolFormatError``
    naming the message and the call: arguments that are not a JSON object would
    otherwise reach the model as ``{}``, a history it never wrote.
    """
    entries = require_list(value, Mapping, f"message {at}'s tool_calls is a list of call dicts")
    calls = []
    for j, entry in enumerate(entries):
        fn = entry.get("function", entry)
        where = f"message {at}, tool call {j}"
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ToolFormatError(f"{where} has no name; a call is {_CALL_SHAPE}")
        try:
            args = arguments_object(fn.get("arguments"))
        except PayloadError as exc:
            raise ToolFormatError(
                f"{where} ({fn['name']!r}) has arguments {fn.get('arguments')!r:.80} that are "
                f"not a JSON object ({exc}); give a dict or its JSON text, e.g. "
                '{"city": "Paris"}'
            ) from exc
        calls.append(ToolCall(fn["name"], args, entry.get("id")))
    return calls


# A template that concatenates ``arguments`` into a string needs JSON text; one that
# pipes it through ``tojson`` needs an object. Templates of one format differ here
# (DeepSeek's own V3/R1 templates concatenate, vLLM's pipe through tojson).
_CONCAT_ARGS = re.compile(
    r"""arguments['"]?\]?\s*\+|\+\s*[\w.\[\]'"]*arguments['"]?\]?\s*(?:\+|-?\}\})"""
)
_TOJSON_ARGS = re.compile(r"arguments['\"]?\]?\s*\|\s*tojson")


# transformers >= 5 drops None-valued message keys before rendering, so a template that
# writes ``message['content'] + ...`` next to its ``is none`` test fails on the missing
# key; "" renders the same calls there. Only a template that renders calls solely when an
# assistant's content is None (DeepSeek's R1-distill) keeps the profile's None.
_CALLS_ONLY_WHEN_NONE = re.compile(
    r"""['"]assistant['"]\s+and\s+message\[['"]content['"]\]\s+is\s+none"""
)


def _content_none(chat_template: str | None, default: str | None) -> str | None:
    if default is None and chat_template and not _CALLS_ONLY_WHEN_NONE.search(chat_template):
        return ""
    return default


def _arguments_style(chat_template: str | None, default: str) -> str:
    if not chat_template:
        return default
    concat = _CONCAT_ARGS.search(chat_template) is not None
    tojson = _TOJSON_ARGS.search(chat_template) is not None
    if concat != tojson:
        return "string" if concat else "object"
    return default


def prepare_messages(
    messages: Iterable[Mapping[str, Any]],
    format: str,
    chat_template: str | None = None,
    *,
    support: TemplateSupport | None = None,
) -> list[dict[str, Any]]:
    """Canonical OpenAI-shaped messages adapted to ``format``'s chat template (new dicts).

    Pass the ``chat_template`` when known: whether it wants the arguments as an
    object or as JSON text, and whether an empty content must stay None, is then
    read from it (templates of one format differ). Pass its ``support``
    (``template_support``) too: a template that drops ``tool_calls`` gets the
    calls written into the content in the format's syntax, one that drops tool
    messages gets each result in a user turn.

    A past call that cannot be rendered as written (no name, arguments that are
    not a JSON object or its JSON text) is a ``ToolFormatError`` naming the
    message and the call, never a quiet ``{}`` the model did not write.
    """
    messages = require_list(messages, Mapping, "messages is a list of message dicts")
    require_text(chat_template, "the chat template prepare_messages reads", optional=True)
    profile = get_profile(format)
    style = profile.style_for(chat_template)
    render = style.render or profile.render
    arguments = _arguments_style(chat_template, style.arguments)
    content_none = _content_none(chat_template, style.content_none)
    calls_in_content = style.calls_in_content or (support is not None and not support.calls)
    tool_role = style.tool_role
    if (
        style.native_tool_role
        and chat_template
        and re.search(style.native_tool_role, chat_template)
    ):
        tool_role = "tool"
    as_user = tool_role == "tool" and support is not None and not support.results
    merge = style.merge_tool_results or as_user
    rewrite = ID_STYLES.get(style.ids)
    ids: dict[str, str] = {}
    unanswered: list[str] = []
    counter = 0
    out: list[dict[str, Any]] = []
    merged: dict[str, Any] | None = None  # the results message later results join
    for at, message in enumerate(messages):
        msg = dict(message)
        role = msg.get("role")
        if role == "assistant" and msg.get("tool_calls"):
            calls = _calls(msg["tool_calls"], at)
            if rewrite is not None:
                renamed = [(c, rewrite(c, counter + i)) for i, c in enumerate(calls)]
                counter += len(calls)
                ids.update((c.id, new) for c, new in renamed if c.id)
                calls = [ToolCall(c.name, c.arguments, new) for c, new in renamed]
            unanswered = [c.id for c in calls if c.id]
            too_many = 0 < style.max_calls < len(calls)
            if calls_in_content or too_many:
                text = _text(msg.get("content"))
                rendered = render(calls)
                msg["content"] = f"{text}\n{rendered}" if text else rendered
                msg.pop("tool_calls")
            else:
                msg["tool_calls"] = [_wire(call, arguments, style.ids) for call in calls]
                if msg.get("content") is None:
                    msg["content"] = content_none
                elif content_none is None and not str(msg["content"]).strip():
                    msg["content"] = None
        elif role == "tool":
            content = style.tool_content.format(content=raw_text(msg.get("content")))
            if as_user:
                name = str(msg.get("name") or "")
                msg = {
                    "role": "user",
                    "content": style.user_result.format(content=content, name=name),
                }
            else:
                msg["role"] = tool_role
                msg["content"] = content
                call_id = msg.get("tool_call_id")
                if call_id in ids:
                    msg["tool_call_id"] = ids[call_id]
                elif rewrite is not None and call_id:
                    msg["tool_call_id"] = rewrite(
                        ToolCall(str(msg.get("name", "")), {}, call_id), counter
                    )
                elif not call_id and unanswered:
                    msg["tool_call_id"] = unanswered[0]
                if msg.get("tool_call_id") in unanswered:
                    unanswered.remove(msg["tool_call_id"])
            if merged is not None:
                merged["content"] += "\n" + msg["content"]
                continue
            out.append(msg)
            merged = msg if merge else None
            continue
        merged = None
        out.append(msg)
    return out


def prepare_chat(
    messages: Iterable[Mapping[str, Any]],
    tools: Iterable[ToolLike] | None,
    format: str,
    *,
    chat_template: str | None = None,
    support: TemplateSupport | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """A canonical chat and its tool specs, adapted to a template: ``(messages, tools=)``.

    Messages go through ``prepare_messages``. The specs stay for the template's
    ``tools=`` argument when it renders them (``support.tools``); otherwise they
    go where the template reads them (the system message's ``tools`` field for
    Phi-4-mini's own template) or, as a ``tools_system_prompt`` block, into the
    system message: appended to the chat's own system message, or to the
    template's default system prompt when the chat has none, so the default is
    kept rather than replaced. Never drops the specs.
    """
    support = support if support is not None else TemplateSupport()
    out = prepare_messages(messages, format, chat_template, support=support)
    tools = tool_list(tools)
    if not tools:
        return out, None
    if support.tools:  # as given (the template reads them); only non-dict specs are converted
        return out, [dict(t) if isinstance(t, Mapping) else _spec(t) for t in tools]
    specs = [_spec(t) for t in tools]
    field = get_profile(format).style_for(chat_template).tools_field
    if field:
        functions = dumps([s["function"] for s in specs])
        return _with_system(out, support.default_system, field=(field, functions)), None
    return _with_system(out, support.default_system, tools_system_prompt(specs, format)), None


def _with_system(
    messages: list[dict[str, Any]],
    default: str,
    text: str = "",
    field: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``messages`` with ``text`` appended to (and ``field`` set on) the system message."""
    if messages and messages[0].get("role") == "system":
        first, rest = dict(messages[0]), messages[1:]
    else:
        first, rest = {"role": "system", "content": default}, messages
    if text:
        first["content"] = f"{_text(first.get('content'))}\n\n{text}".strip()
    if field is not None:
        first[field[0]] = field[1]
        if first.get("content") is None:
            first["content"] = ""
    return [first, *rest]


def _text(content: Any) -> str:
    """Message content as plain text (OpenAI content parts joined)."""
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, Mapping) else str(p) for p in content]
        return "".join(parts).strip()
    return str(content or "").strip()


def _wire(call: ToolCall, arguments: str, ids: str) -> dict[str, Any]:
    entry = ToolCall(call.name, call.arguments, None if ids == "none" else call.id).to_openai()
    if arguments == "string":
        entry["function"]["arguments"] = dumps(call.arguments)
    return entry


def _spec(tool: ToolLike) -> dict[str, Any]:
    spec = tool.to_openai() if isinstance(tool, ToolSpec) else dict(tool)
    if "function" not in spec:
        spec = {"type": "function", "function": spec}
    return spec


def tools_system_prompt(tools: Iterable[ToolLike], format: str) -> str:
    """A system-message block describing ``tools`` and ``format``'s call syntax.

    For chat templates without tool support. Shape (documented, stable)::

        # Tools

        You can call the functions described below (one JSON object each, OpenAI format):
        <tools>
        {"type": "function", "function": {...}}
        </tools>

        To call functions, reply with exactly this syntax (several calls may follow each other):
        <example call in the format's wire syntax>
        Each result comes back to you in the next message.

    No tools give ``""``: no block at all, as ``prepare_chat`` adds none (an empty
    ``<tools>`` list would tell the model about a calling syntax it has nothing to call
    with). ``format`` is checked all the same, so a typo surfaces before the first tool.
    """
    profile = get_profile(format)
    specs = tool_list(tools)
    if not specs:
        return ""
    lines = "\n".join(dumps(_spec(t)) for t in specs)
    example = profile.render([ToolCall("function_name", {"argument": "value"})])
    return (
        "# Tools\n\n"
        "You can call the functions described below (one JSON object each, OpenAI format):\n"
        f"<tools>\n{lines}\n</tools>\n\n"
        "To call functions, reply with exactly this syntax "
        "(several calls may follow each other):\n"
        f"{example}\n"
        "Each result comes back to you in the next message."
    )
