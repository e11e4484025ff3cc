# SPDX-License-Identifier: Apache-2.0
"""Turn a ``Request`` into the exact prompt text and token ids a step feeds.

Invariant: ``render(request)`` is the one string that ``generate`` tokenizes,
and ``encode`` tokenizes it without adding special tokens, so
``count_tokens(format_prompt(r))`` equals the prompt length used by
``generate``. Raw prompts get the tokenizer's BOS token prefixed as text when
the tokenizer would normally add one, which keeps that invariant.

Messages are rendered with the tokenizer's chat template; ``continue_final``
renders without a generation prompt and continues the last assistant message.
What the template renders of a tool conversation is probed once
(``toolcalls.template_support``): tools go to its ``tools=`` argument when it
renders them, otherwise (when a tool-call format is known, which for a
template without tool support is ``toolcalls.DEFAULT_FORMAT``) into the system
message, after the template's own default system prompt; past calls and
results it would drop are written in the format (``toolcalls.prepare_chat``).
``prepare`` is that adaptation alone; training renders its chats through it
too, so training and serving cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mp13_engine import toolcalls
from mp13_engine._errors import ChatTemplateError, RequestError
from mp13_engine._types import Request


class PromptFormatter:
    """Renders and tokenizes prompts for one tokenizer (thread-safe: no mutable state)."""

    def __init__(self, tokenizer: Any, tool_format: str | None = None):
        self._tok = tokenizer
        self.tool_format = tool_format
        template = getattr(tokenizer, "chat_template", None)
        self.chat_template: str | None = template if isinstance(template, str) else None
        #: What the template renders of a tool conversation (None: no template).
        self.template_support = (
            toolcalls.template_support(tokenizer) if self.chat_template is not None else None
        )
        self.template_uses_tools = (
            self.template_support.tools
            if self.template_support is not None
            else bool(self.chat_template and "tools" in self.chat_template)
        )
        self._bos_text = self._bos_prefix(tokenizer)

    @staticmethod
    def _bos_prefix(tokenizer: Any) -> str:
        bos_id = tokenizer.bos_token_id
        if bos_id is None or tokenizer.bos_token is None:
            return ""
        with_special = tokenizer("a", add_special_tokens=True)["input_ids"]
        return tokenizer.bos_token if with_special and with_special[0] == bos_id else ""

    def render(self, request: Request) -> str:
        """The exact prompt text for ``request`` (raises ``RequestError``/``ChatTemplateError``)."""
        if request.messages is None and request.prompt is None:
            raise RequestError("a Request needs `messages` (chat) or `prompt` (raw text)")
        if request.messages is not None and request.prompt is not None:
            raise RequestError("give a Request either `messages` or `prompt`, not both")
        if request.prompt is not None:
            text = request.prompt
            if self._bos_text and not text.startswith(self._bos_text):
                text = self._bos_text + text
            return text
        return self._render_messages(request)

    def _render_messages(self, request: Request) -> str:
        if self.chat_template is None:
            raise ChatTemplateError(
                "this model's tokenizer has no chat template, so `messages` cannot be rendered; "
                "send a raw `prompt` instead, or load a model whose tokenizer has a chat template"
            )
        messages = [dict(m) for m in request.messages or ()]
        if not messages:
            raise RequestError("Request.messages is empty; give at least one message")
        if request.continue_final and messages[-1].get("role") != "assistant":
            raise RequestError(
                "continue_final=True needs the last message to be an assistant message to "
                "continue; append one or drop continue_final"
            )
        messages, tools = self.prepare(messages, request.tools)
        kwargs: dict[str, Any] = dict(request.chat_template_kwargs or {})
        if tools:
            kwargs["tools"] = tools
        try:
            return self._tok.apply_chat_template(
                messages,
                tokenize=False,
                add_generation_prompt=not request.continue_final,
                continue_final_message=request.continue_final,
                **kwargs,
            )
        except Exception as exc:
            raise RequestError(
                f"the chat template could not render these messages: {exc}; check the roles "
                "and message shapes this model's template accepts"
            ) from exc

    def prepare(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """Canonical chat and tool specs adapted to this template (new dicts).

        The ONE adaptation serving (:meth:`render`) and training share, so a
        trained chat renders exactly as the same chat is served: tool calls in
        the shape this template reads (e.g. JSON-text arguments for DeepSeek's,
        the call text in the content where it drops ``tool_calls``), tool specs
        in the system message when the template ignores ``tools=``
        (``toolcalls.prepare_chat``).
        """
        out = [dict(m) for m in messages]
        fmt = self.tool_format
        if fmt is None:
            return out, [dict(t) for t in tools] if tools else None
        return toolcalls.prepare_chat(
            out, tools, fmt, chat_template=self.chat_template, support=self.template_support
        )

    def encode(self, text: str) -> list[int]:
        return list(self._tok(text, add_special_tokens=False)["input_ids"])
