# SPDX-License-Identifier: Apache-2.0
"""Formats first written from memory, pinned to what their public sources show.

Each test states one fact learned from a model's published chat template,
tokenizer or reference parser (sources listed in the project notes,
toolcalls_verification.md). The small templates below are written here to
exercise exactly that fact (how past calls, ids and results are rendered);
they are not copies of the published ones. Round trips render prepared
messages with transformers' jinja renderer (imported lazily, skipped without
it), cut out the assistant turn and parse it again.
"""

from __future__ import annotations

import pytest

from mp13_engine import toolcalls
from mp13_toolbox import ToolCall
from tests._shared import SHARED_TEMPLATES
from tests.engine.toolcalls._toolcalls_cases import (
    TOOLS,
    assistant_part,
    render_template,
    support_of,
)

CALL = ToolCall(
    "get_weather",
    {"city": "São Paulo", "days": 3, "zip": "007", "metric": True, "extra": {"a": [1, "b"]}},
)
PING = ToolCall("ping", {})


def _canonical(calls: list[ToolCall], ids: list[str]) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": c.to_openai()["function"]}
            for c, i in zip(calls, ids, strict=True)
        ],
    }


def _round_trip(template: str, fmt: str, calls: list[ToolCall]) -> toolcalls.ParsedOutput:
    ids = [f"call_{n}" for n in range(len(calls))]
    messages = [{"role": "user", "content": "Weather?"}, _canonical(calls, ids)]
    prepared = toolcalls.prepare_messages(messages, fmt, chat_template=template)
    again = toolcalls.parse(assistant_part(template, prepared), fmt, TOOLS)
    assert [(c.name, c.arguments) for c in again.tool_calls] == [
        (c.name, c.arguments) for c in calls
    ]
    assert again.errors == ()
    return again


def _results_turn(template: str, fmt: str) -> tuple[list[dict], str]:
    """Prepared messages of a call and its result, and the prompt they render to."""
    messages = [
        {"role": "user", "content": "Weather?"},
        _canonical([CALL], ["call_abc"]),
        {"role": "tool", "tool_call_id": "call_abc", "name": "get_weather", "content": "RAIN-42"},
    ]
    prepared = toolcalls.prepare_messages(messages, fmt, chat_template=template)
    return prepared, render_template(template, prepared, True)


# --- mistral_v11: mistral-common's InstructTokenizerV11 / V13 -------------------------------

# v11 writes [TOOL_CALLS]name[CALL_ID]id[ARGS]{json} per call, results as
# [TOOL_RESULTS]id[TOOL_CONTENT]content[/TOOL_RESULTS]; ids are 9 alphanumerics.
MISTRAL_V11 = """{{- bos_token -}}
{%- for m in messages -%}
{%- if m.role == 'user' -%}[INST]{{ m.content }}[/INST]
{%- elif m.role == 'assistant' and m.tool_calls -%}
{%- for c in m.tool_calls -%}
{%- if c.id is not string or c.id | length != 9 -%}
{{ raise_exception('ids: 9 chars') }}
{%- endif -%}
[TOOL_CALLS]{{ c.function.name }}[CALL_ID]{{ c.id }}[ARGS]{{ c.function.arguments | tojson }}
{%- endfor -%}{{ eos_token }}
{%- elif m.role == 'assistant' -%}{{ m.content }}{{ eos_token }}
{%- elif m.role == 'tool' -%}
[TOOL_RESULTS]{{ m.tool_call_id }}[TOOL_CONTENT]{{ m.content }}[/TOOL_RESULTS]
{%- endif -%}
{%- endfor -%}"""


def test_mistral_v11_puts_the_call_id_between_name_and_args():
    text = '[TOOL_CALLS]get_weather[CALL_ID]Ab3dE6gH9[ARGS]{"city": "Oslo"}[TOOL_CALLS]ping[ARGS]{}'
    out = toolcalls.parse(text, "mistral_v11")
    assert out.tool_calls == (
        ToolCall("get_weather", {"city": "Oslo"}, "Ab3dE6gH9"),
        ToolCall("ping", {}),
    )
    assert toolcalls.detect_format(MISTRAL_V11) == "mistral_v11"


def test_mistral_v11_ids_survive_the_template_and_match_their_result():
    again = _round_trip(MISTRAL_V11, "mistral_v11", [CALL, PING])
    ids = [c.id for c in again.tool_calls]
    assert all(len(i) == 9 and i.isalnum() for i in ids) and len(set(ids)) == 2
    prepared, prompt = _results_turn(MISTRAL_V11, "mistral_v11")
    call_id = prepared[1]["tool_calls"][0]["id"]
    assert f"[TOOL_RESULTS]{call_id}[TOOL_CONTENT]RAIN-42[/TOOL_RESULTS]" in prompt


# --- kimi_k2: Moonshot's tool-call guide and the Kimi K2 template -------------------------

# Calls: section tokens around per-call tokens, the id written back verbatim, arguments
# as given (JSON text) or through tojson. Results: "## Return of <id>" in a tool turn.
KIMI = """{%- for m in messages -%}
{%- if m.role == 'user' -%}<|im_user|>user<|im_middle|>{{ m.content }}<|im_end|>
{%- elif m.role == 'assistant' -%}<|im_assistant|>assistant<|im_middle|>{{ m.content or '' }}
{%- if m.tool_calls -%}<|tool_calls_section_begin|>
{%- for c in m.tool_calls -%}<|tool_call_begin|>{{ c.id }}<|tool_call_argument_begin|>
{%- if c.function.arguments is string -%}{{ c.function.arguments }}
{%- else -%}{{ c.function.arguments | tojson }}{%- endif -%}<|tool_call_end|>
{%- endfor -%}<|tool_calls_section_end|>{%- endif -%}<|im_end|>
{%- elif m.role == 'tool' -%}<|im_system|>tool<|im_middle|>## Return of {{ m.tool_call_id }}
{{ m.content }}<|im_end|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"""


def test_kimi_ids_count_calls_across_the_conversation_and_reach_the_results():
    messages = [
        {"role": "user", "content": "Weather?"},
        _canonical([CALL], ["call_a"]),
        {"role": "tool", "tool_call_id": "call_a", "content": "RAIN-42"},
        _canonical([PING], ["call_b"]),
        {"role": "tool", "tool_call_id": "call_b", "content": "PONG-7"},
    ]
    prepared = toolcalls.prepare_messages(messages, "kimi_k2", chat_template=KIMI)
    prompt = render_template(KIMI, prepared, True)
    assert "## Return of functions.get_weather:0\nRAIN-42" in prompt
    assert "## Return of functions.ping:1\nPONG-7" in prompt
    again = toolcalls.parse(assistant_part(KIMI, prepared[:2]), "kimi_k2", TOOLS)
    assert again.tool_calls == (ToolCall(CALL.name, CALL.arguments, "functions.get_weather:0"),)


def test_kimi_keeps_only_ids_of_its_own_form_in_the_history_and_in_rendered_calls():
    """``functions.NAME:N`` is kept; ``functions.ping:last`` (no index) is rewritten."""
    from mp13_engine.toolcalls._kimi_k2 import PROFILE

    messages = [
        {"role": "user", "content": "Weather?"},
        _canonical([CALL, PING], ["functions.get_weather:7", "functions.ping:last"]),
        {"role": "tool", "tool_call_id": "functions.get_weather:7", "content": "RAIN-42"},
        {"role": "tool", "tool_call_id": "functions.ping:last", "content": "PONG-7"},
    ]
    prompt = render_template(
        KIMI, toolcalls.prepare_messages(messages, "kimi_k2", chat_template=KIMI), True
    )
    assert "## Return of functions.get_weather:7\nRAIN-42" in prompt
    assert "## Return of functions.ping:1\nPONG-7" in prompt
    calls = [ToolCall("ping", {}, "functions.ping:last"), ToolCall("ping", {}, "functions.ping:4")]
    rendered = PROFILE.render(calls)
    assert "functions.ping:0<|tool_call_argument_begin|>" in rendered
    assert "functions.ping:4<|tool_call_argument_begin|>" in rendered


def test_kimi_accepts_whitespace_around_the_id_and_detects_the_first_template():
    text = (
        "<|tool_calls_section_begin|><|tool_call_begin|> functions.get_weather:3 "
        '<|tool_call_argument_begin|> {"city": "Oslo"} <|tool_call_end|>'
        "<|tool_calls_section_end|>"
    )
    out = toolcalls.parse(text, "kimi_k2")
    assert out.tool_calls == (ToolCall("get_weather", {"city": "Oslo"}, "functions.get_weather:3"),)
    first = "{% if tools %}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>"
    assert toolcalls.detect_format(first + "{% endif %}") == "kimi_k2"
    assert toolcalls.detect_format(KIMI) == "kimi_k2"


# --- llama4_pythonic: Meta's Llama 4 template asks for JSON, vLLM's for a pythonic list ---

# Meta's template: JSON instruction in the prompt; past calls written after an (empty)
# <|python_start|><|python_end|> pair as {"name": ..., "parameters": ...}; results in ipython.
LLAMA4_META = """{{- bos_token -}}
{%- for m in messages -%}
{%- if m.role == 'tool' -%}<|header_start|>ipython<|header_end|>

{{ m.content }}<|eot|>
{%- elif m.tool_calls -%}<|header_start|>assistant<|header_end|>

<|python_start|>{{ m.content or '' }}<|python_end|>
{%- for c in m.tool_calls -%}
{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}
{%- endfor -%}<|eot|>
{%- else -%}<|header_start|>{{ m.role }}<|header_end|>

{%- if m.role == 'user' and tools %}Respond with JSON for a function call.{% endif %}
{{ m.content }}<|eot|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|header_start|>assistant<|header_end|>

{% endif -%}"""


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "get_weather", "parameters": {"city": "Oslo"}}<|eot|>',
        '<|python_start|>{"name": "get_weather", "parameters": {"city": "Oslo"}}<|python_end|>',
        '<|python_start|>[get_weather(city="Oslo")]<|python_end|><|eom|>',
        "[get_weather(city='Oslo')]<|eot|>",
    ],
)
def test_llama4_accepts_json_objects_and_pythonic_lists(text):
    out = toolcalls.parse(text, "llama4_pythonic")
    assert out.tool_calls == (ToolCall("get_weather", {"city": "Oslo"}),)
    assert out.content == "" and out.errors == ()


def test_llama4_json_calls_round_trip_through_metas_template_layout():
    assert toolcalls.detect_format(LLAMA4_META) == "llama4_pythonic"
    messages = [{"role": "user", "content": "Weather?"}, _canonical([CALL, PING], ["c0", "c1"])]
    prepared = toolcalls.prepare_messages(messages, "llama4_pythonic", chat_template=LLAMA4_META)
    part = assistant_part(LLAMA4_META, prepared)
    assert part.count('"parameters": ') == 2
    again = toolcalls.parse(part, "llama4_pythonic", TOOLS)
    assert [(c.name, c.arguments) for c in again.tool_calls] == [
        (CALL.name, CALL.arguments),
        (PING.name, PING.arguments),
    ]
    assert again.errors == () and again.content == ""


def test_llama4_json_in_prose_is_not_a_call():
    out = toolcalls.parse('Send {"name": "x"} to the API.', "llama4_pythonic")
    assert out.tool_calls == () and out.content == 'Send {"name": "x"} to the API.'


# --- minimax_m2: MiniMax-M2's template and vLLM's minimax_m2 parser ------------------------

# One <minimax:tool_call> block holding an <invoke> per call; a parameter's value is the
# raw string, or tojson of a non-string; results as <response> in one tool turn.
MINIMAX_M2 = """{%- for m in messages -%}
{%- if m.role == 'user' -%}]~b]user
{{ m.content }}[e~[
{% elif m.role == 'assistant' -%}]~b]ai
{{ m.content or '' }}
{%- if m.tool_calls %}
<minimax:tool_call>
{% for c in m.tool_calls -%}
<invoke name="{{ c.function.name }}">
{% for k, v in c.function.arguments | items -%}
<parameter name="{{ k }}">{{ v if v is string else v | tojson }}</parameter>
{% endfor -%}
</invoke>
{% endfor -%}
</minimax:tool_call>
{%- endif -%}[e~[
{% elif m.role == 'tool' -%}]~b]tool
<response>{{ m.content }}</response>[e~[
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}]~b]ai
{% endif -%}"""


def test_minimax_m2_parallel_invokes_round_trip_with_typed_values():
    assert toolcalls.detect_format(MINIMAX_M2) == "minimax_m2"
    _round_trip(MINIMAX_M2, "minimax_m2", [CALL, PING])
    prepared, prompt = _results_turn(MINIMAX_M2, "minimax_m2")
    assert prepared[2]["role"] == "tool" and "<response>RAIN-42</response>" in prompt


def test_minimax_m2_output_after_thinking_in_the_prompt():
    text = (
        'Need it.</think>\n\n<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="city">Oslo</parameter>\n<parameter name="days">2</parameter>\n'
        "</invoke>\n</minimax:tool_call>[e~["
    )
    out = toolcalls.parse(text, "minimax_m2", TOOLS)
    assert out.reasoning == "Need it." and out.content == ""
    assert out.tool_calls == (ToolCall("get_weather", {"city": "Oslo", "days": 2}),)


# --- seed_oss: Seed-OSS's template and vLLM's seed_oss parser ------------------------------

# One <seed:tool_call> per call, <parameter=k>value</parameter> with no layout newlines;
# a non-string value goes through jinja's |string (Python spelling: True, {'a': 1}).
SEED_OSS = """{%- for m in messages -%}
{%- if m.role == 'assistant' and m.tool_calls -%}<seed:bos>assistant
{%- for c in m.tool_calls %}
<seed:tool_call>
<function={{ c.function.name }}>
{% for k, v in c.function.arguments | items -%}
<parameter={{ k }}>{{ v if v is string else v | string }}</parameter>
{% endfor -%}
</function>
</seed:tool_call>
{%- endfor -%}<seed:eos>
{%- else -%}<seed:bos>{{ m.role }}
{{ m.content }}<seed:eos>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<seed:bos>assistant
{% endif -%}"""


def test_seed_oss_values_written_in_python_spelling_come_back_typed():
    assert toolcalls.detect_format(SEED_OSS) == "seed_oss"
    _round_trip(SEED_OSS, "seed_oss", [CALL, PING])
    prepared, prompt = _results_turn(SEED_OSS, "seed_oss")
    assert prepared[2]["role"] == "tool" and "<seed:bos>tool\nRAIN-42<seed:eos>" in prompt


# --- xlam: xLAM's templates (vLLM examples) and the Berkeley leaderboard's xLAM handler ----

# Past calls: one JSON list of each call's function object through tojson (arguments must
# be an object, as the model writes them); results in a tool turn.
XLAM = """{%- for m in messages -%}
{%- if m.role == 'system' -%}<|im_start|>system
{{ m.content }}<|im_end|>
{% elif m.role == 'tool' -%}<|im_start|>tool
{{ m.content }}<|im_end|>
{% elif m.tool_calls -%}<|im_start|>assistant
[{% for c in m.tool_calls %}{{ c.function | tojson }}
{%- if not loop.last %}, {% endif %}{% endfor %}]<|im_end|>
{% else -%}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}"""


def test_xlam_past_calls_keep_object_arguments():
    again = _round_trip(XLAM, "xlam", [CALL, PING])
    assert again.content == ""
    messages = [{"role": "user", "content": "Weather?"}, _canonical([CALL], ["c0"])]
    part = assistant_part(XLAM, toolcalls.prepare_messages(messages, "xlam", XLAM))
    assert part.startswith('[{"name": "get_weather", "arguments": {"city": "São Paulo", ')


def test_xlam_is_detected_by_its_system_prompt():
    prompt = "You are developed by Salesforce xLAM team. Make calls in a JSON array."
    assert toolcalls.detect_format("{{ '" + prompt + "' }}" + XLAM) == "xlam"
    assert toolcalls.detect_format(XLAM) is None


# --- internlm: InternLM's chat format doc and vLLM's InternLM2 tool template ---------------

# A tool-aware template maps role "tool" to "environment name=<|plugin|>" and rejects
# other roles; the plain ChatML one writes whatever role it is given.
INTERNLM_TOOLS = """{%- for m in messages -%}
{%- if m.role in ['user', 'system'] -%}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% elif m.role == 'assistant' -%}<|im_start|>assistant
{{ m.content }}<|im_end|>
{% elif m.role == 'tool' -%}<|im_start|>environment name=<|plugin|>
{{ m.content }}<|im_end|>
{% else -%}{{ raise_exception('unsupported role ' + m.role) }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}"""
CHATML = """{%- for m in messages -%}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}"""


def test_internlm_results_use_the_tool_role_where_the_template_maps_it():
    prepared, prompt = _results_turn(INTERNLM_TOOLS, "internlm")
    assert prepared[2]["role"] == "tool"
    assert "<|im_start|>environment name=<|plugin|>\nRAIN-42<|im_end|>" in prompt
    call = toolcalls.parse(prepared[1]["content"], "internlm", TOOLS).tool_calls
    assert call == (CALL,)


def test_internlm_results_become_an_environment_turn_in_plain_chatml():
    # InternLM's chat format: plugin results come back under "environment name=<|plugin|>".
    prepared, prompt = _results_turn(CHATML, "internlm")
    assert prepared[2]["role"] == "environment name=<|plugin|>"
    assert "<|im_start|>environment name=<|plugin|>\nRAIN-42<|im_end|>" in prompt
    assert '"parameters": ' in prepared[1]["content"]


# --- gemma_tool_code: Google's Gemma function-calling guide ---------------------------------

# Gemma's template knows only user/model turns and demands that they alternate.
GEMMA = """{{- bos_token -}}
{%- for m in messages -%}
{%- if (m.role == 'user') != (loop.index0 % 2 == 0) -%}
{{ raise_exception('roles must alternate user/assistant') }}
{%- endif -%}
<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}
{{ m.content }}<end_of_turn>
{% endfor -%}
{%- if add_generation_prompt -%}<start_of_turn>model
{% endif -%}"""


def test_gemma_calls_and_results_fit_a_strictly_alternating_template():
    messages = [
        {"role": "user", "content": "Weather?"},
        _canonical([CALL, PING], ["c0", "c1"]),
        {"role": "tool", "tool_call_id": "c0", "content": "RAIN-42"},
        {"role": "tool", "tool_call_id": "c1", "content": "PONG-7"},
    ]
    prepared = toolcalls.prepare_messages(messages, "gemma_tool_code", chat_template=GEMMA)
    prompt = render_template(GEMMA, prepared, True)
    assert "```tool_output\nRAIN-42\n```\n```tool_output\nPONG-7\n```" in prompt
    calls = toolcalls.parse(prepared[1]["content"], "gemma_tool_code", TOOLS).tool_calls
    assert [(c.name, c.arguments) for c in calls] == [
        (CALL.name, CALL.arguments),
        (PING.name, PING.arguments),
    ]


# --- functiongemma: Google's FunctionGemma formatting guide, vLLM's and llama.cpp's parsers --

# Calls: <start_function_call>call:NAME{key:value,...}<end_function_call>, keys sorted, strings
# in <escape>, other values bare; results: <start_function_response>response:NAME{...}.
FUNCTIONGEMMA = """{{- bos_token -}}
{%- macro value(v) -%}
{%- if v is string -%}<escape>{{ v }}<escape>
{%- elif v is mapping -%}{ {%- for k, x in v | dictsort -%}{{ k }}:{{ value(x) }}
{%- if not loop.last %},{% endif %}{%- endfor -%} }
{%- elif v is iterable -%}[{%- for x in v -%}{{ value(x) }}{% if not loop.last %},{% endif %}
{%- endfor -%}]
{%- elif v is sameas true -%}true{%- elif v is sameas false -%}false
{%- elif v is none -%}null{%- else -%}{{ v }}{%- endif -%}
{%- endmacro -%}
{%- if tools -%}<start_of_turn>developer
You are a model that can do function calling with the following functions
{%- for t in tools -%}<start_function_declaration>declaration:{{ t.function.name }}
{{- value({'description': t.function.description}) }}<end_function_declaration>
{%- endfor -%}<end_of_turn>
{% endif -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}<start_of_turn>model
{{ m.content or '' }}
{%- for c in m.tool_calls or [] -%}<start_function_call>call:{{ c.function.name }}
{{- value(c.function.arguments) }}<end_function_call>{%- endfor -%}<end_of_turn>
{% elif m.role == 'tool' -%}<start_of_turn>user
<start_function_response>response:{{ m.name }}{{ value({'value': m.content}) }}
{{- '<end_function_response>' }}<end_of_turn>
{% else -%}<start_of_turn>{{ m.role }}
{{ m.content }}<end_of_turn>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<start_of_turn>model
{% endif -%}"""


def test_functiongemma_values_are_typed_by_markup_and_schema():
    text = (
        "<start_function_call>call:get_weather{city:<escape>São Paulo, BR<escape>,days:3,"
        "extra:{a:[1,<escape>b<escape>]},metric:true,zip:007}<end_function_call>"
    )
    out = toolcalls.parse(text, "functiongemma", TOOLS)
    args = {"city": "São Paulo, BR", "days": 3, "extra": {"a": [1, "b"]}, "metric": True}
    assert out.tool_calls == (ToolCall("get_weather", {**args, "zip": "007"}),)
    assert toolcalls.detect_format(FUNCTIONGEMMA) == "functiongemma"


def test_functiongemma_calls_and_results_round_trip_through_its_markup():
    again = _round_trip(FUNCTIONGEMMA, "functiongemma", [CALL, PING])
    assert again.content == ""
    prepared, prompt = _results_turn(FUNCTIONGEMMA, "functiongemma")
    assert prepared[2]["role"] == "tool"
    assert "response:get_weather{value:<escape>RAIN-42<escape>}" in prompt
    assert "<start_function_declaration>declaration:get_weather" in prompt


def test_functiongemma_stops_where_the_model_waits_for_the_response():
    text = "<start_function_call>call:ping{}<end_function_call><start_function_response>"
    out = toolcalls.parse(text, "functiongemma")
    assert out == toolcalls.ParsedOutput(tool_calls=(PING,))


# vLLM's FunctionGemma template writes each past value as <escape>{{ value }}<escape>: a
# number would come back as a string, so past calls go into the content instead.
FUNCTIONGEMMA_VLLM = """{%- for m in messages -%}
{%- if m.role == 'assistant' and m.tool_calls -%}<start_of_turn>model
{%- for c in m.tool_calls %}
<start_function_call>call:{{ c.function.name }}{
{%- for key, value in c.function.arguments.items() -%}
{{ key }}:<escape>{{ value }}<escape>{% if not loop.last %},{% endif %}
{%- endfor -%}
}<end_function_call>
{%- endfor %}
<end_of_turn>
{%- else -%}<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}
{{ m.content }}<end_of_turn>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<start_of_turn>model
{%- endif -%}"""


def test_functiongemma_on_vllms_template_keeps_typed_values_in_the_history():
    messages = [{"role": "user", "content": "Weather?"}, _canonical([CALL], ["c0"])]
    prepared = toolcalls.prepare_messages(messages, "functiongemma", FUNCTIONGEMMA_VLLM)
    assert "tool_calls" not in prepared[1]
    part = assistant_part(FUNCTIONGEMMA_VLLM, prepared)
    assert "days:3" in part and "metric:true" in part
    again = toolcalls.parse(part, "functiongemma")  # no schema needed: the markup types them
    assert again.tool_calls == (ToolCall(CALL.name, CALL.arguments),)


# --- granite_20b_fc: vLLM's granite-20b-functioncalling template and parser -----------------


def test_granite_20b_no_function_is_no_call():
    text = '<function_call> {"name": "no_function", "arguments": {}}<|endoftext|>'
    assert toolcalls.parse(text, "granite_20b_fc") == toolcalls.ParsedOutput()
    mixed = (
        '<function_call> {"name": "no_function", "arguments": {}} '
        '<function_call> {"name": "ping", "arguments": {}}'
    )
    assert toolcalls.parse(mixed, "granite_20b_fc").tool_calls == (PING,)


# --- phi4_mini: the model's own template (tools in the system message's "tools" field) ------


def test_phi4_mini_own_template_gets_tools_calls_and_results_where_it_reads_them():
    template = (SHARED_TEMPLATES / "phi4_mini_own.jinja").read_text()
    support = support_of(template)
    assert not support.tools and not support.calls  # it reads neither tools= nor tool_calls
    messages = [
        {"role": "user", "content": "Weather?"},
        _canonical([CALL], ["call_abc"]),
        {"role": "tool", "tool_call_id": "call_abc", "name": "get_weather", "content": "RAIN-42"},
    ]
    prepared, tools = toolcalls.prepare_chat(
        messages, TOOLS, "phi4_mini", chat_template=template, support=support
    )
    assert tools is None and prepared[0]["role"] == "system"
    prompt = render_template(template, prepared, True, None)
    assert prompt.startswith('<|system|><|tool|>[{"name": "get_weather", "description": ')
    assert '<|assistant|><|tool_call|>[{"name": "get_weather", "arguments": {"city": "S' in prompt
    assert "<|tool_response|>RAIN-42<|end|><|assistant|>" in prompt
    again = toolcalls.parse(prepared[2]["content"], "phi4_mini", TOOLS)
    assert again.tool_calls == (ToolCall(CALL.name, CALL.arguments),)


def test_phi4_mini_keeps_a_given_system_message_next_to_the_tools():
    template = (SHARED_TEMPLATES / "phi4_mini_own.jinja").read_text()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    prepared, _ = toolcalls.prepare_chat(
        messages, TOOLS, "phi4_mini", chat_template=template, support=support_of(template)
    )
    prompt = render_template(template, prepared, True, None)
    assert prompt.startswith("<|system|>Be brief.<|tool|>[{")


# --- llama4_pythonic on vLLM's template: it quotes every past argument ---------------------

# As vLLM's Llama 4 pythonic template writes past calls: param="value" for every value.
LLAMA4_VLLM = """{{- bos_token -}}
{%- for message in messages -%}
{%- if not (message.role == 'tool' or message.tool_calls) -%}
<|header_start|>{{ message.role }}<|header_end|>

{{ message.content }}<|eot|>
{%- elif 'tool_calls' in message -%}<|header_start|>assistant<|header_end|>

{{ message.content }}[
{%- for tool_call in message.tool_calls -%}
{%- set tool_call = tool_call.function -%}
{{- tool_call.name + '(' -}}
{%- for param in tool_call.arguments -%}
{{- param + '="' -}}{{- "%s" | format(tool_call.arguments[param]) -}}{{- '"' -}}
{%- if not loop.last %}, {% endif -%}
{%- endfor -%})
{%- if not loop.last %}, {% endif -%}
{%- endfor -%}]<|eot|>
{%- else -%}<|header_start|>ipython<|header_end|>

{{ message.content | tojson }}<|eot|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|header_start|>assistant<|header_end|>

{% endif -%}"""


def test_llama4_history_on_vllms_template_keeps_numbers_numbers():
    assert toolcalls.detect_format(LLAMA4_VLLM) == "llama4_pythonic"
    messages = [{"role": "user", "content": "Weather?"}, _canonical([CALL], ["c0"])]
    prepared = toolcalls.prepare_messages(messages, "llama4_pythonic", LLAMA4_VLLM)
    part = assistant_part(LLAMA4_VLLM, prepared)
    assert "days=3" in part and 'days="3"' not in part
    again = toolcalls.parse(part, "llama4_pythonic")  # typed without any schema
    assert again.tool_calls == (ToolCall(CALL.name, CALL.arguments),)
    # Meta's own template still gets the calls as tool_calls (it writes JSON itself).
    meta = toolcalls.prepare_messages(messages, "llama4_pythonic", LLAMA4_META)
    assert meta[1]["tool_calls"]
