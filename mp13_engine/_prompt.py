# SPDX-License-Identifier: Apache-2.0
"""Turn a ``Request`` into the exact prompt text and token ids a step feeds.

Invariant: ``prompt(request)`` is the one rendering ``generate`` tokenizes:
its ``text`` (what ``render``/``format_prompt`` return) plus the spans of that
text where message data spells a control token, which ``TokenizerGuard``
encodes as plain text (``mp13_engine._markup``). Without such spans,
``count_tokens(format_prompt(r))`` equals the prompt length ``generate`` uses;
with them only ``count_tokens(r)`` does (the text alone cannot say which
spellings are markup). Raw prompts get the tokenizer's BOS token prefixed as
text when the tokenizer would normally add one, which keeps that invariant;
their control-token spellings are markup (their author writes the template).
Roles beyond system/user/assistant/tool are served only to a template that
names them (``ipython`` to Llama 3, ``tool_results`` to Mistral...). A lone
surrogate in any text is rendered as U+FFFD (``_markup.encodable``), so the text
``format_prompt`` shows is exactly what is tokenized.

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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jinja2

from mp13_engine import toolcalls
from mp13_engine._errors import ChatTemplateError, RequestError, ToolFormatError
from mp13_engine._markup import Prompt, SpecialText, encodable
from mp13_engine._request_fields import CORE_ROLES, ROLES
from mp13_engine._types import Request


class PromptFormatter:
    """Renders prompts for one tokenizer (thread-safe: no mutable state)."""

    def __init__(self, tokenizer: Any, tool_format: str | None = None):
        self._tok = tokenizer
        self.tool_format = tool_format
        template = getattr(tokenizer, "chat_template", None)
        self.chat_template: str | None = template if isinstance(template, str) else None
        #: What the template renders of a tool conversation (None: no template).
        self.template_support = (
            toolcalls.template_support(tokenizer) if self.chat_template is not None else None
        )
        self._bos_text = self._bos_prefix(tokenizer)
        self.special = SpecialText.of(tokenizer)

    @staticmethod
    def _bos_prefix(tokenizer: Any) -> str:
        bos_id = tokenizer.bos_token_id
        if bos_id is None or tokenizer.bos_token is None:
            return ""
        with_special = tokenizer("a", add_special_tokens=True)["input_ids"]
        return tokenizer.bos_token if with_special and with_special[0] == bos_id else ""

    def prompt(self, request: Request) -> Prompt:
        """The prompt text for ``request`` and the spans of it that are data spelling markup.

        Raw prompts are markup throughout. For chats, when some string of the
        data (messages, tools, template variables) spells a special token, the
        chat is rendered a second time with that data defanged, to tell the
        template's markup from the data's (see ``mp13_engine._markup``).
        """
        text = self.render(request)
        if request.prompt is not None:
            return Prompt(text)
        data = (request.messages or (), request.tools, request.chat_template_kwargs)
        return Prompt(text, self.special.forged_in(text, data, self._defanged(request)))

    def render(self, request: Request) -> str:
        """The exact prompt text for ``request`` (raises ``RequestError``/``ChatTemplateError``)."""
        if request.prompt is not None:
            text = encodable(request.prompt)
            if self._bos_text and not text.startswith(self._bos_text):
                text = self._bos_text + text
            return text
        if self.chat_template is None:
            raise ChatTemplateError(
                "this model's tokenizer has no chat template, so `messages` cannot be rendered; "
                "send a raw `prompt` instead, or load a model whose tokenizer has a chat template"
            )
        messages = request.messages or ()
        self._check_roles(messages)
        return self._render_chat(request, messages, request.tools, request.chat_template_kwargs)

    def _defanged(self, request: Request) -> Callable[[Any], str]:
        def render(data: Any) -> str:
            try:
                return self._render_chat(request, *data)
            except RequestError as exc:
                raise RequestError(
                    "the messages spell control tokens of this model and its chat template "
                    f"cannot render them with those spellings neutralised ({exc}); remove the "
                    "control-token text from the messages"
                ) from exc

        return render

    def _check_roles(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Roles beyond system/user/assistant/tool only for a template that names them."""
        for i, message in enumerate(messages):
            if not self._serves_role(message["role"]):
                known = ", ".join(r for r in ROLES if self._serves_role(r))
                raise RequestError(
                    f"message {i} has role {message['role']!r}, which this model's chat template "
                    f"does not handle; use one of {known}",
                    field="messages",
                )

    def _serves_role(self, role: str) -> bool:
        template = self.chat_template or ""
        return role in CORE_ROLES or f"'{role}'" in template or f'"{role}"' in template

    def _render_chat(
        self,
        request: Request,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        template_kwargs: Mapping[str, Any] | None,
    ) -> str:
        try:
            prepared, specs = self.prepare(messages, tools)
            kwargs: dict[str, Any] = dict(template_kwargs or {})
            if specs:
                kwargs["tools"] = specs
            text: str = self._tok.apply_chat_template(
                prepared,
                tokenize=False,
                add_generation_prompt=not request.continue_final,
                continue_final_message=request.continue_final,
                **kwargs,
            )
        except ToolFormatError as exc:  # a tool call the chat cannot be rendered from
            raise RequestError(f"invalid Request.messages: {exc}", field="messages") from exc
        except jinja2.TemplateSyntaxError as exc:  # the template's fault, not the messages'
            raise ChatTemplateError(
                f"this model's chat template is not valid Jinja (line {exc.lineno}: "
                f"{exc.message}); fix chat_template.jinja or tokenizer_config.json's "
                "chat_template in the model's folder. Raw prompts (Request(prompt=...)) work "
                "meanwhile"
            ) from exc
        except Exception as exc:
            raise RequestError(
                f"the chat template could not render these messages: {exc}; check the roles, "
                "their order and the message shapes this model's template accepts"
            ) from exc
        # Same length as rendered: the forged spans found against the defanged rendering
        # keep their offsets.
        return encodable(text)

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
