# SPDX-License-Identifier: Apache-2.0
"""Render a training example into token ids plus a loss mask (1 = this token is learned).

Chats are rendered with the tokenizer's own chat template, so training sees
exactly the prompt format the engine serves. The assistant-only mask does not
need ``{% generation %}`` markers in the template: for each assistant message
``i`` we render the conversation up to it with the generation prompt
(``pre``) and up to and including it (``upto``); the text ``upto`` adds after
``pre`` is the turn's *body* (content, tool-call markup, end-of-turn token).
Its span in the full rendering is found, in order: right after ``pre`` when
the template is prefix-stable (ChatML, Llama 3, Granite: exact); else the
body's next occurrence after the previous turn (templates that re-render
earlier context, e.g. Mistral's ``[AVAILABLE_TOOLS]`` before the last user
turn); else, when the template rewrites the turn itself (e.g. Qwen3 dropping
an old empty think block), the longest tail of the body that occurs there, so
the span shrinks but never grows into non-assistant text. Templates that indent
their output (DeepSeek V3) emit different layout whitespace around a turn, and a
trailing newline after the last message only: the context is then matched
ignoring whitespace, and the body is found without that trailing whitespace.

Invariants: ``len(ids) == len(mask)``; a token is in the mask iff its first
non-whitespace character lies in an assistant span (chats: BPE merges layout
whitespace into the next word), in the completion or the final
EOS (prompt/completion), or anywhere (text, or ``loss_on="all"``).
``fit_to_length`` then applies ``max_seq_len`` to the rendered rows.
"""

from __future__ import annotations

import array
import bisect
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from mp13_engine._errors import ChatTemplateError, DatasetError
from mp13_engine._training._data import Example, ExampleKind

#: ``(messages, tools) -> (messages, tools)``: the serving-side adaptation of a chat.
Prepare = Callable[
    [Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None],
    tuple[list[dict[str, Any]], list[dict[str, Any]] | None],
]
#: ``(text, (messages, tools), render) -> (ids, offsets)``: the engine's encoding of a rendered
#: chat, where message text that spells control tokens stays text (``TokenizerGuard.encode_chat``).
EncodeChat = Callable[[str, Any, Callable[[Any], str]], tuple[list[int], list[tuple[int, int]]]]


#: Typecode of ``TrainingRow.ids``: C ``int``, 4 bytes on every platform torch runs on (``"l"``
#: is 4 bytes on Windows but 8 on Linux). Token ids are vocabulary indices, far below 2**31.
IDS_TYPECODE = "i"
#: Typecode of ``TrainingRow.mask``: one unsigned byte per token.
MASK_TYPECODE = "B"


def _ids(values: Any) -> array.array[int]:
    if isinstance(values, array.array) and values.typecode == IDS_TYPECODE:
        return values
    return array.array(IDS_TYPECODE, values)


def _mask(values: Any) -> array.array[int]:
    if isinstance(values, array.array) and values.typecode == MASK_TYPECODE:
        return values
    return array.array(MASK_TYPECODE, values)


@attrs.frozen
class TrainingRow:
    """Token ids of one example and its loss mask (same length): what a micro-batch is made of.

    Both are stored compactly, as ``array`` buffers (4 bytes an id, 1 byte a mask entry; any
    sequence of ints given is converted): a job holds every row of its dataset for the whole
    run, and tuples of Python ints took about 44 bytes a token, several GB for a 500 MB
    dataset. The trainer reads them as buffers (``torch.frombuffer``), without a Python int
    per token. Treat them as read-only: rows compare by value, but cannot be hashed.
    """

    ids: array.array[int] = attrs.field(converter=_ids)
    mask: array.array[int] = attrs.field(converter=_mask)

    @property
    def n_loss(self) -> int:
        """Tokens in the loss (non-zero mask entries, as ``batches`` reads them): counted on
        the bytes, several times faster than summing a Python int a token, per window."""
        return len(self.mask) - self.mask.tobytes().count(0)


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items (characters, token ids) ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    i = 0
    # Compare in chunks first: rendered chats share long prefixes.
    step = 256
    while i + step <= n and a[i : i + step] == b[i : i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _render(tokenizer: Any, messages: Any, tools: Any, prepare: Prepare | None, gen: bool) -> str:
    """The chat rendered by the template, after ``prepare`` adapted it as serving does."""
    messages = [dict(m) for m in messages]
    if prepare is not None:
        messages, tools = prepare(messages, tools)
    try:
        text: str = tokenizer.apply_chat_template(
            messages,
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=gen,
        )
        return text
    except Exception as exc:  # jinja raises TemplateError/TypeError/... from user templates
        raise DatasetError(
            f"The chat template could not render a training chat: {exc}. Check the message "
            "roles and order (some templates require user/assistant alternation)."
        ) from exc


def assistant_spans(
    tokenizer: Any, example: Example, prepare: Prepare | None = None
) -> tuple[str, list[tuple[int, int]]]:
    """The full rendered chat and the character spans of its assistant messages.

    ``prepare(messages, tools) -> (messages, tools)`` adapts canonical messages
    to the template exactly as serving does (the engine's tool-call format:
    ``prepare_messages``, tool specs in the system message when the template
    has no ``tools`` support).
    """
    if not tokenizer.chat_template:
        raise ChatTemplateError(
            "The tokenizer has no chat template, so chat ('messages') rows cannot be rendered. "
            "Use prompt/completion or text rows, or load a model with a chat template."
        )

    def render(upto: int, gen: bool) -> str:
        if upto == 0:
            return ""
        return _render(tokenizer, example.messages[:upto], example.tools, prepare, gen)

    full = render(len(example.messages), gen=False)
    spans: list[tuple[int, int]] = []
    cursor = 0
    for i, message in enumerate(example.messages):
        if message["role"] != "assistant":
            continue
        pre, upto = render(i, gen=True), render(i + 1, gen=False)
        body = _body(pre, upto, functools.partial(render, i, gen=False))
        if not body:
            continue
        start = _common_prefix(pre, full)
        if start == len(pre) and full.startswith(body, start):
            end = start + len(body)  # prefix-stable template: exact
        elif (found := full.find(body, cursor)) >= 0 or (
            # Whitespace a template writes only after the last message (DeepSeek's trailing
            # newline) is not part of the turn once more messages follow it.
            body.rstrip() != body and (found := full.find(body.rstrip(), cursor)) >= 0
        ):
            # Earlier context renders differently once more messages follow (e.g. Mistral
            # moves [AVAILABLE_TOOLS], Hermes closes tool results differently), but the
            # turn itself is unchanged: find it after the previous one.
            if not full.startswith(body, found):
                body = body.rstrip()
            start, end = found, found + len(body)
        else:
            if start < len(pre):
                header = pre[_common_prefix(render(i, gen=False), pre) :]
                found = full.find(header, max(start, cursor)) if header else -1
                if found < 0:
                    continue
                start = found + len(header)
            start = max(start, cursor)
            end = _find_tail(full, start, body)
        if end > start:
            spans.append((start, end))
            cursor = end
    return full, spans


def _body(pre: str, upto: str, context: Callable[[], str]) -> str:
    """This assistant turn as rendered when it is the last message (content ... end of turn)."""
    k = _common_prefix(pre, upto)
    body = upto[k:]
    if k == len(pre):
        return body
    # Templates that indent their output (DeepSeek) emit different whitespace around the
    # same markup depending on what follows: when the context still matches once
    # whitespace is ignored, the turn is what follows it, without that layout whitespace.
    if (w := _skip_layout(pre, upto)) is not None and (tail := upto[w:].lstrip()):
        return tail
    # The template renders the context differently once the turn follows it (e.g. Hermes
    # closes a tool result with an extra newline; Mistral moves the system prompt). The
    # turn starts after the generation prompt, or, for templates without one, after the
    # longest stretch of `body` that merely repeats the end of the context.
    header = pre[_common_prefix(context(), pre) :]
    if header and (h := body.find(header)) >= 0:
        return body[h + len(header) :]
    for size in range(min(len(pre), len(body) - 1), 0, -1):
        if pre.endswith(body[:size]):
            return body[size:]
    return body


def _skip_layout(pre: str, upto: str) -> int | None:
    """Index in ``upto`` right after ``pre`` when they match ignoring whitespace, else None."""
    j = 0
    for ch in pre:
        if ch.isspace():
            continue
        while j < len(upto) and upto[j].isspace():
            j += 1
        if j >= len(upto) or upto[j] != ch:
            return None
        j += 1
    return j


def _find_tail(full: str, start: int, body: str) -> int:
    """End of this assistant turn in ``full`` when the template rewrote its beginning.

    Some templates render a non-final assistant turn differently (e.g. drop its
    reasoning); its end (content + end-of-turn) is still the same text. Find the
    longest suffix of ``body`` that occurs in ``full`` no further than
    ``len(body)`` past ``start`` (occurrence is monotone in the suffix length,
    so bisect). Returns ``start`` (empty span) when nothing fits.
    """

    def at(k: int) -> int:
        idx = full.find(body[k:], start, start + 2 * len(body))
        return idx if 0 <= idx - start <= len(body) else -1

    lo, hi = 0, len(body)  # find the smallest k whose suffix occurs
    while lo < hi:
        mid = (lo + hi) // 2
        if at(mid) >= 0:
            hi = mid
        else:
            lo = mid + 1
    if lo >= len(body):
        return start
    return at(lo) + len(body) - lo


def _encode(tokenizer: Any, text: str, special: bool) -> tuple[list[int], list[tuple[int, int]]]:
    enc = tokenizer(text, add_special_tokens=special, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def _anchor(full: str, offset: tuple[int, int]) -> int:
    """The character that decides a token's mask: its first non-whitespace one.

    BPE merges a template's layout whitespace into the next word or marker (``"   <"``),
    so a token that starts with whitespace outside a turn can still carry the turn's text.
    """
    start, end = offset
    stripped = len(full[start:end]) - len(full[start:end].lstrip())
    return start + stripped if stripped < end - start else start


def span_test(spans: Sequence[tuple[int, int]]) -> Callable[[int], bool]:
    """``pos -> any(start <= pos < end for start, end in spans)``, by bisection over the spans
    merged (a per-token scan of every span was a quarter of the time a chat took to render)."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    starts = [start for start, _ in merged]

    def inside(pos: int) -> bool:
        k = bisect.bisect_right(starts, pos) - 1
        return k >= 0 and pos < merged[k][1]

    return inside


def render_example(
    tokenizer: Any,
    example: Example,
    loss_on: str = "assistant",
    prepare: Prepare | None = None,
    encode_chat: EncodeChat | None = None,
) -> TrainingRow:
    """Token ids and loss mask of ``example`` (see the module docstring).

    ``encode_chat`` (the engine's) keeps message text that spells control tokens text.
    """
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    match example.kind:
        case ExampleKind.MESSAGES:
            # The template already writes BOS where the family wants one.
            full, spans = assistant_spans(tokenizer, example, prepare)
            if encode_chat is None:
                ids, offsets = _encode(tokenizer, full, special=False)
            else:
                ids, offsets = encode_chat(
                    full,
                    (example.messages, example.tools),
                    lambda data: _render(tokenizer, data[0], data[1], prepare, False),
                )
            if loss_on == "all":
                mask = [1] * len(ids)
            else:
                inside = span_test(spans)
                mask = [int(inside(_anchor(full, off))) for off in offsets]
        case ExampleKind.COMPLETION:
            prompt_ids, _ = _encode(tokenizer, example.prompt, special=True)
            full_ids, _ = _encode(tokenizer, example.prompt + example.completion, special=True)
            # Tokenize prompt+completion together (as generation would see it) and find where
            # the prompt's tokens stop matching; BPE can merge across the boundary.
            cut = _common_prefix(prompt_ids, full_ids)
            ids = full_ids + eos
            first = 0 if loss_on == "all" else cut
            mask = [int(i >= first) for i in range(len(ids))]
        case ExampleKind.TEXT:
            ids, _ = _encode(tokenizer, example.text, special=True)
            ids = ids + eos
            mask = [1] * len(ids)
    return TrainingRow(ids, mask)


def fit_to_length(
    rows: list[TrainingRow], max_seq_len: int, overflow: str
) -> tuple[list[TrainingRow], int, int]:
    """``rows`` fitted to ``max_seq_len``, and how many were cut and how many left out.

    A longer row is cut to that length (``overflow="truncate"``) or left out (``"drop"``);
    a row left with no token to learn is left out too."""
    out, truncated, dropped = [], 0, 0
    for row in rows:
        if len(row.ids) > max_seq_len:
            if overflow == "drop":
                dropped += 1
                continue
            truncated += 1
            row = TrainingRow(row.ids[:max_seq_len], row.mask[:max_seq_len])
        if row.n_loss == 0:
            dropped += 1
            continue
        out.append(row)
    return out, truncated, dropped
