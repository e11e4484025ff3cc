# SPDX-License-Identifier: Apache-2.0
"""What a chat template does with a tool conversation, found by rendering small probes.

A format's syntax says how calls look; the template decides whether tool
specs, past calls and tool results reach the prompt at all. Many templates
(SmolLM2's, plain ChatML) ignore ``tools=``, drop ``tool_calls`` and write a
default system prompt of their own. ``template_support`` renders a few tiny
conversations with sentinel names through the tokenizer's own
``apply_chat_template`` and reads off what came out, so the answer is exactly
what serving and training will get; it never raises on what a template does
(a probe that fails counts as "not rendered"). What it is given must be a
tokenizer, though: a template string (or anything without
``apply_chat_template``) is refused with a ``ToolFormatError``, since every
probe would fail on it and the answer, "renders everything", would be wrong.

Invariants: probing is pure (the tokenizer is only asked to render text), and
a template that cannot even render one user message is reported as
``TemplateSupport()`` (everything supported, nothing known), so probing never
changes how such a template is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from mp13_engine._errors import ToolFormatError
from mp13_toolbox import ToolCall, ToolSpec

_USER = "mp13-probe-user"
_SYSTEM = "mp13-probe-system"
_TOOL = "mp13_probe_tool"
_CALL = "mp13_probe_call"
_RESULT = "mp13-probe-result"
_CALL_ID = "mp13probe"  # 9 alphanumerics: Mistral's templates refuse other ids

_SPEC = ToolSpec(_TOOL, "probe").to_openai()
_CALLING = {
    "role": "assistant",
    "content": "",
    "tool_calls": [ToolCall(_CALL, {"probe": 1}, _CALL_ID).to_openai()],
}
_RESULT_MSG = {"role": "tool", "tool_call_id": _CALL_ID, "name": _CALL, "content": _RESULT}


@attrs.frozen
class TemplateSupport:
    """What a chat template renders of a tool conversation.

    ``tools``: tool specs passed as ``tools=``; ``calls``: an assistant
    message's ``tool_calls``; ``results``: a ``tool`` message's content;
    ``default_system``: the system prompt the template writes itself when the
    chat has none ("" when it writes none). The defaults mean "renders
    everything, writes no system prompt of its own".
    """

    tools: bool = True
    calls: bool = True
    results: bool = True
    default_system: str = ""


def template_support(tokenizer: Any) -> TemplateSupport:
    """Probe ``tokenizer.apply_chat_template`` (its own chat template) for tool support.

    ``tokenizer``: a transformers tokenizer (``AutoTokenizer.from_pretrained(...)``,
    ``engine.tokenizer``) or anything with ``apply_chat_template``; ``ToolFormatError``
    otherwise (for a template string, ``detect_format`` names the format it uses).
    """
    if not callable(getattr(tokenizer, "apply_chat_template", None)):
        raise ToolFormatError(
            "template_support probes a tokenizer (anything with apply_chat_template, e.g. "
            f"AutoTokenizer.from_pretrained(path) or engine.tokenizer), not "
            f"{type(tokenizer).__name__}; to set a template string on one, assign "
            "tokenizer.chat_template first (detect_format(template) names the format it uses)"
        )

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        text: str = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=False
        )
        return text

    def shows(text: str, messages: list[dict[str, Any]], tools: Any = None) -> bool:
        try:
            return text in render([dict(m) for m in messages], tools)
        except Exception:  # a template refusing the probe does not render it
            return False

    user = {"role": "user", "content": _USER}
    if not shows(_USER, [user]):
        return TemplateSupport()
    tools = [_SPEC]
    # Probe with tools given: some templates iterate ``tools`` without a guard.
    results = shows(_RESULT, [user, _CALLING, _RESULT_MSG], tools) or shows(
        _RESULT, [user, {"role": "assistant", "content": "ok"}, _RESULT_MSG], tools
    )
    # Some templates render calls only when the content is None (DeepSeek's R1 distills).
    silent = {**_CALLING, "content": None}
    return TemplateSupport(
        tools=shows(_TOOL, [user], tools),
        calls=shows(_CALL, [user, _CALLING], tools) or shows(_CALL, [user, silent], tools),
        results=results,
        default_system=_default_system(render, user),
    )


def _default_system(render: Callable[..., str], user: dict[str, Any]) -> str:
    """The text a template writes where a system message would go, when none is given.

    Rendered with a sentinel system message, the template writes ``P + sentinel
    + S``; without one, a template with a default writes ``P + default + S``
    (``P`` and ``S`` unchanged), one without writes something else.
    """
    try:
        bare = render([dict(user)], None)
        marked = render([{"role": "system", "content": _SYSTEM}, dict(user)], None)
    except Exception:
        return ""
    at = marked.find(_SYSTEM)
    if at < 0:
        return ""
    head, tail = marked[:at], marked[at + len(_SYSTEM) :]
    if len(bare) < len(head) + len(tail) or not (bare.startswith(head) and bare.endswith(tail)):
        return ""
    return bare[len(head) : len(bare) - len(tail)].strip()
