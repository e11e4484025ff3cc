# SPDX-License-Identifier: Apache-2.0
"""Tools on a chat template without tool support (the tiny ``smollm2`` family, SmolLM2's
template): ``Request.tools`` never vanish, past calls and results are never dropped.

The template renders no ``tools=``, no ``tool_calls`` and writes a default system prompt.
The engine then uses ``toolcalls.DEFAULT_FORMAT`` (hermes): the tools go into the system
prompt after that default, the reply's ``<tool_call>`` is parsed, past calls go back in the
assistant content and results in tool turns, for serving and for training alike. A format
forced in the config is used the same way.
"""

from __future__ import annotations

import json

import pytest

from mp13_engine import (
    Engine,
    FinishReason,
    Request,
    RequestError,
    ToolFormatError,
    TrainingConfig,
    toolcalls,
)
from mp13_toolbox import ToolCall

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
CALL = {
    "id": "call0000a",
    "type": "function",
    "function": {"name": "calculator", "arguments": {"expression": "17*23"}},
}
TWO_ROUNDS = [
    {"role": "user", "content": "What is 17*23?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "name": "calculator", "content": "391", "tool_call_id": "call0000a"},
    {"role": "assistant", "content": "It is 391."},
    {"role": "user", "content": "And 391*2?"},
    {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "call0000b",
                "type": "function",
                "function": {"name": "calculator", "arguments": {"expression": "391*2"}},
            }
        ],
    },
    {"role": "tool", "name": "calculator", "content": "782", "tool_call_id": "call0000b"},
]


@pytest.fixture(scope="module")
def engine(tiny_model_factory):
    with Engine.load(str(tiny_model_factory("smollm2")), device="cpu") as eng:
        yield eng


def _system(prompt: str) -> str:
    return prompt.split("<|im_end|>")[0]


def test_tools_reach_the_prompt_in_the_default_format_after_the_default_system(engine):
    assert engine.tool_format == toolcalls.DEFAULT_FORMAT == "hermes"
    plain = engine.format_prompt(Request(messages=[{"role": "user", "content": "Hi"}]))
    assert _system(plain) == f"<|im_start|>system\n{DEFAULT_SYSTEM}"
    prompt = engine.format_prompt(
        Request(messages=[{"role": "user", "content": "Hi"}], tools=TOOLS)
    )
    system = _system(prompt)
    assert system.startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM}\n\n# Tools\n")
    assert '"name": "calculator"' in system and "<tool_call>" in system
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_a_given_system_message_gets_the_tools_instead_of_the_default(engine):
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]
    prompt = engine.format_prompt(Request(messages=messages, tools=TOOLS))
    assert _system(prompt).startswith("<|im_start|>system\nBe terse.\n\n# Tools\n")
    assert DEFAULT_SYSTEM not in prompt


def test_a_two_round_tool_exchange_renders_every_call_and_result(engine):
    prompt = engine.format_prompt(Request(messages=TWO_ROUNDS, tools=TOOLS))
    first = '{"name": "calculator", "arguments": {"expression": "17*23"}}'
    second = '{"name": "calculator", "arguments": {"expression": "391*2"}}'
    assert f"<|im_start|>assistant\n<tool_call>\n{first}\n</tool_call><|im_end|>" in prompt
    assert "<|im_start|>tool\n391<|im_end|>" in prompt
    assert f"assistant\nLet me check.\n<tool_call>\n{second}\n</tool_call><|im_end|>" in prompt
    assert "<|im_start|>tool\n782<|im_end|>\n<|im_start|>assistant\n" in prompt
    resp = engine.generate(Request(messages=TWO_ROUNDS, tools=TOOLS, max_new_tokens=4))
    assert resp.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)


@pytest.mark.parametrize(
    ("fmt", "call_text"),
    [
        ("mistral_v11", '[TOOL_CALLS]calculator[ARGS]{"expression": "17*23"}'),
        ("llama3_json", '{"name": "calculator", "parameters": {"expression": "17*23"}}'),
    ],
)
def test_a_forced_format_renders_past_calls_in_its_syntax(tiny_model_factory, fmt, call_text):
    with Engine.load(str(tiny_model_factory("smollm2")), device="cpu", tool_format=fmt) as eng:
        assert eng.tool_format == fmt
        prompt = eng.format_prompt(Request(messages=TWO_ROUNDS[:4], tools=TOOLS))
    assert f"<|im_start|>assistant\n{call_text}<|im_end|>" in prompt
    assert "<|im_start|>tool\n391<|im_end|>" in prompt
    example = toolcalls.render_calls([ToolCall("function_name", {"argument": "value"})], fmt)
    assert example in _system(prompt)  # the system prompt teaches the forced syntax


def test_training_rows_with_calls_put_the_loss_on_the_call(engine, tmp_path):
    row = {"messages": TWO_ROUNDS[:4], "tools": TOOLS}
    job = engine.train(
        TrainingConfig(adapter="calls", dataset=[row], max_steps=1, output_dir=str(tmp_path / "a"))
    )
    assert job.result(60).steps == 1
    rendered = job._train[0]
    learned = engine.tokenizer.decode(
        [t for t, m in zip(rendered.ids, rendered.mask, strict=True) if m]
    )
    first = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "17*23"}}\n'
    assert learned.startswith(first + "</tool_call><|im_end|>")
    assert "It is 391." in learned
    assert "17*23?" not in learned and "391<|im_end|>\n<|im_start|>assistant" not in learned


@pytest.mark.slow
def test_a_model_trained_to_call_gets_its_call_parsed(engine, tmp_path):
    """End to end: trained on rows whose answer is a call, the model's reply is a call."""
    rows = [
        {
            "messages": [
                {"role": "user", "content": question},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"type": "function", "function": {"name": "calculator", "arguments": a}}
                    ],
                },
            ],
            "tools": TOOLS,
        }
        for question, a in [("What is 17*23?", {"expression": "17*23"}), ("Hi!", {})]
    ]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    job = engine.train(
        TrainingConfig(
            adapter="caller",
            dataset=str(tmp_path / "rows.jsonl"),
            max_steps=80,
            learning_rate=1e-2,
            output_dir=str(tmp_path / "caller"),
        )
    )
    assert job.result(300).final_loss < 0.1
    request = Request(
        messages=[{"role": "user", "content": "What is 17*23?"}],
        tools=TOOLS,
        adapters=["caller"],
        max_new_tokens=40,
    )
    resp = engine.generate(request)
    assert [(c.name, c.arguments) for c in resp.tool_calls] == [
        ("calculator", {"expression": "17*23"})
    ]
    assert resp.text == "" and "<tool_call>" in resp.raw_text
    chunks = list(engine.stream(request))
    assert [c.tool_call.name for c in chunks if c.tool_call] == ["calculator"]


# A template that renders the tools itself, with a call syntax of its own that no format knows.
UNKNOWN_SYNTAX = (
    "{% if tools %}Tools: {{ tools | tojson }}\nCall one as >>>CALL name(args)\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture
def unknown_syntax_model(tiny_model_factory, tmp_path):
    import shutil

    dest = tmp_path / "unknown-syntax"
    shutil.copytree(tiny_model_factory("chatml"), dest)
    for template in dest.glob("*.jinja"):
        template.write_text(UNKNOWN_SYNTAX)
    config = dest / "tokenizer_config.json"
    data = json.loads(config.read_text())
    if "chat_template" in data:
        data["chat_template"] = UNKNOWN_SYNTAX
        config.write_text(json.dumps(data))
    return dest


def test_a_template_whose_call_syntax_no_format_knows_is_named_at_load(
    unknown_syntax_model, caplog
):
    assert toolcalls.detect_format(UNKNOWN_SYNTAX) is None
    caplog.set_level("WARNING", logger="mp13_engine")
    with Engine.load(str(unknown_syntax_model), device="cpu") as eng:
        assert eng.tool_format is None
        prompt = eng.format_prompt(Request(messages=TWO_ROUNDS[:1], tools=TOOLS))
        assert prompt.startswith("Tools: [") and '"calculator"' in prompt  # the template's own
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1, warned
    assert "matches no known format" in warned[0]
    assert "EngineConfig.tool_format" in warned[0] and "register_format" in warned[0]


def test_a_template_with_an_unknown_syntax_parses_once_a_format_is_set(
    unknown_syntax_model, caplog
):
    caplog.set_level("WARNING", logger="mp13_engine")
    with Engine.load(str(unknown_syntax_model), device="cpu", tool_format="hermes") as eng:
        assert eng.tool_format == "hermes"
    assert not [r for r in caplog.records if "matches no known format" in r.getMessage()]


def test_a_template_that_shows_no_tools_is_not_warned_about(tiny_model_factory, caplog):
    caplog.set_level("WARNING", logger="mp13_engine")
    with Engine.load(str(tiny_model_factory("smollm2")), device="cpu") as eng:
        assert eng.tool_format == toolcalls.DEFAULT_FORMAT
    assert not [r for r in caplog.records if "matches no known format" in r.getMessage()]


def test_a_past_call_with_arguments_that_are_not_json_is_refused_where_it_is_built(engine):
    # it used to reach the model as {"name": "calculator", "arguments": {}}
    bad = {**CALL, "function": {"name": "calculator", "arguments": '{"expression": 17*23}'}}
    chat = [TWO_ROUNDS[0], {**TWO_ROUNDS[1], "tool_calls": [bad]}, TWO_ROUNDS[2]]
    with pytest.raises(RequestError, match="arguments are a dict or its JSON text") as info:
        Request(messages=chat, tools=TOOLS, max_new_tokens=2)
    assert info.value.field == "messages"
    # toolcalls.prepare_chat, which the engine renders through, refuses it on its own too
    with pytest.raises(ToolFormatError, match=r"message 1, tool call 0 \('calculator'\)"):
        engine._state.formatter.prepare(chat, TOOLS)
    assert engine.generate(Request(messages=TWO_ROUNDS, tools=TOOLS, max_new_tokens=2)).ok


def test_registering_the_unknown_syntax_lets_the_engine_detect_and_use_it(
    unknown_syntax_model, caplog
):
    # the way out the load warning names: a format whose detect pattern the template matches
    fmt = toolcalls.Profile(
        name="arrow_call",
        openers=(toolcalls.Opener(">>>CALL", ends=("<<<",), quoted='"'),),
        decode=lambda payload, ctx: toolcalls.calls_from_json(payload),
        render=lambda calls: "".join(
            f">>>CALL {json.dumps({'name': c.name, 'arguments': c.arguments})}<<<" for c in calls
        ),
        detect=(r">>>CALL",),
    )
    caplog.set_level("WARNING", logger="mp13_engine")
    with (
        toolcalls.register_format(fmt),
        Engine.load(str(unknown_syntax_model), device="cpu") as eng,
    ):
        assert eng.tool_format == "arrow_call"
        prompt = eng.format_prompt(Request(messages=TWO_ROUNDS[:3], tools=TOOLS))
        reply = 'Sure. >>>CALL {"name": "calculator", "arguments": {"expression": "2*3"}}<<<'
        parsed = toolcalls.parse(reply, eng.tool_format)
    # the template drops tool_calls, so the past call is written in the registered syntax
    assert '>>>CALL {"name": "calculator", "arguments": {"expression": "17*23"}}<<<' in prompt
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [
        ("calculator", {"expression": "2*3"})
    ]
    assert not [r for r in caplog.records if "matches no known format" in r.getMessage()]
