# SPDX-License-Identifier: Apache-2.0
"""Chats going back to a template without tool support: nothing is dropped.

SmolLM2's template (tests/templates/smollm2.jinja) renders no ``tools=``, no
``tool_calls`` and writes a default system prompt when the chat has none. With the
default format (hermes) ``prepare_chat`` puts the tool specs into the system prompt
after that default, past calls into the assistant content and results into tool turns;
a template that drops tool turns gets each result in a user turn instead.
"""

from __future__ import annotations

import pytest

from mp13_engine import ToolFormatError, toolcalls
from mp13_toolbox import ToolCall
from tests._shared import SHARED_TEMPLATES
from tests.engine.toolcalls._toolcalls_cases import (
    TOOLS,
    WEATHER,
    assistant_part,
    render_template,
    support_of,
)

SMOLLM2 = (SHARED_TEMPLATES / "smollm2.jinja").read_text()
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
CALL = {"id": "c1", "type": "function", "function": WEATHER.to_openai()["function"]}
EXCHANGE = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "RAIN-42"},
]


def _prepare(messages, template=SMOLLM2, tools=TOOLS):
    return toolcalls.prepare_chat(
        messages,
        tools,
        toolcalls.DEFAULT_FORMAT,
        chat_template=template,
        support=support_of(template),
    )


@pytest.mark.parametrize("given", [SMOLLM2, None, {"chat_template": SMOLLM2}])
def test_template_support_refuses_what_is_not_a_tokenizer(given):
    # every probe would fail on a template string, and "renders everything" would be wrong
    with pytest.raises(ToolFormatError, match=r"probes a tokenizer.*tokenizer\.chat_template"):
        toolcalls.template_support(given)


def test_smollm2_template_support_is_probed_from_rendering():
    assert toolcalls.detect_format(SMOLLM2) is None
    assert support_of(SMOLLM2) == toolcalls.TemplateSupport(
        tools=False, calls=False, results=True, default_system=DEFAULT_SYSTEM
    )


def test_tools_join_the_templates_default_system_prompt():
    messages, tools = _prepare([{"role": "user", "content": "Hi"}])
    assert tools is None
    prompt = render_template(SMOLLM2, messages, True, None)
    system = prompt.split("<|im_end|>")[0]
    assert system.startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM}\n\n# Tools")
    assert '"name": "get_weather"' in system and "<tool_call>" in system
    assert prompt.count("<|im_start|>system") == 1


def test_tools_are_appended_to_the_chats_own_system_message():
    chat = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]
    messages, _ = _prepare(chat)
    assert messages[0]["content"].startswith("Be terse.\n\n# Tools")
    assert DEFAULT_SYSTEM not in render_template(SMOLLM2, messages, True, None)


def test_past_calls_and_results_render_and_parse_back():
    messages, _ = _prepare(EXCHANGE)
    prompt = render_template(SMOLLM2, messages, True, None)
    assert "<|im_start|>tool\nRAIN-42<|im_end|>" in prompt
    part = assistant_part(SMOLLM2, messages[:3], None)
    assert part.startswith("<tool_call>\n")
    calls = toolcalls.parse(part, "hermes", TOOLS).tool_calls
    assert calls == (ToolCall(WEATHER.name, WEATHER.arguments),)


def test_a_template_that_drops_tool_turns_gets_results_in_one_user_turn():
    template = (
        "{% for m in messages %}{% if m.role in ['user', 'assistant', 'system'] %}"
        "<|{{ m.role }}|>{{ m.content }}<|end|>{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    second = {"role": "tool", "tool_call_id": "c2", "name": "get_weather", "content": "SUN-7"}
    messages, _ = _prepare([*EXCHANGE, second], template=template)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[3]["content"] == (
        "<tool_response>\nRAIN-42\n</tool_response>\n<tool_response>\nSUN-7\n</tool_response>"
    )
    assert "SUN-7" in render_template(template, messages, True, None)


def test_no_tools_leaves_the_chat_and_its_default_alone():
    chat = [{"role": "user", "content": "Hi"}]
    assert _prepare(chat, tools=None) == (chat, None)
    assert _prepare(chat, tools=[]) == (chat, None)


def test_a_template_with_tool_support_keeps_tools_for_the_template():
    hermes = (SHARED_TEMPLATES / "hermes.jinja").read_text()
    messages, tools = toolcalls.prepare_chat(
        EXCHANGE, TOOLS, "hermes", chat_template=hermes, support=support_of(hermes)
    )
    assert tools == TOOLS and messages[1]["tool_calls"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]


def test_the_probe_sees_calls_a_template_renders_only_without_content():
    template = (
        "{% for m in messages %}{% if m.role == 'assistant' and m.content is none %}"
        "{% for c in m.tool_calls %}CALL:{{ c.function.name }}{% endfor %}"
        "{% else %}{{ m.role }}:{{ m.content }}{% endif %}{% endfor %}"
    )
    support = support_of(template)
    assert support.calls and not support.tools and support.results


def test_a_template_that_cannot_render_a_user_message_is_left_as_it_is():
    broken = "{{ raise_exception('nope') }}"
    assert support_of(broken) == toolcalls.TemplateSupport()


def test_tool_results_get_the_call_ids_their_format_expects():
    """A result without an id answers the pending call; one whose call is no longer in the
    chat (history trimmed) still gets an id in the format's own shape."""
    pending = [EXCHANGE[0], EXCHANGE[1], {"role": "tool", "content": "RAIN-42"}]
    assert toolcalls.prepare_messages(pending, "hermes")[2]["tool_call_id"] == "c1"
    orphan = [EXCHANGE[0], {"role": "tool", "tool_call_id": "c0", "name": "f", "content": "4"}]
    mistral_id = toolcalls.prepare_messages(orphan, "mistral")[1]["tool_call_id"]
    assert len(mistral_id) == 9 and mistral_id.isalnum() and mistral_id != "c0"
    assert toolcalls.prepare_messages(orphan, "kimi_k2")[1]["tool_call_id"] == "functions.f:0"


def test_empty_content_next_to_calls_is_none_where_the_format_wants_none():
    blank = {"role": "assistant", "content": "  ", "tool_calls": [CALL]}
    (deepseek,) = toolcalls.prepare_messages([blank], "deepseek_v3")
    assert deepseek["content"] is None and deepseek["tool_calls"][0]["function"]["name"] == (
        "get_weather"
    )
    assert toolcalls.prepare_messages([blank], "hermes")[0]["content"] == "  "


def test_flat_tool_specs_and_a_contentless_system_message():
    flat = {"name": "ping", "description": "Check.", "parameters": {"type": "object"}}
    no_tools = toolcalls.TemplateSupport(tools=False)
    prepared, specs = toolcalls.prepare_chat(EXCHANGE[:1], [flat], "hermes", support=no_tools)
    assert specs is None and '"name": "ping"' in prepared[0]["content"]
    template = (SHARED_TEMPLATES / "phi4_mini_own.jinja").read_text()
    system = {"role": "system", "content": None}
    prepared, _ = toolcalls.prepare_chat(
        [system, EXCHANGE[0]], [flat], "phi4_mini", chat_template=template, support=no_tools
    )
    assert prepared[0]["content"] == "" and '"name": "ping"' in prepared[0]["tools"]


def test_a_template_that_drops_system_messages_has_no_default_system_prompt():
    template = (
        "{% for m in messages %}{% if m.role != 'system' %}{{ m.role }}: {{ m.content }}\n"
        "{% endif %}{% endfor %}"
    )
    assert support_of(template).default_system == ""
