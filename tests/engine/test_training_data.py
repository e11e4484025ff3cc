# SPDX-License-Identifier: Apache-2.0
"""Training data without a model: config validation, dataset shapes, loss masks per template."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mp13_engine import ConfigError, ConfigKeywordError, DatasetError, Mp13Error, TrainingConfig
from mp13_engine._training._config import config_to_dict
from mp13_engine._training._data import ExampleKind, load_examples, split, to_example
from mp13_engine._training._render import render_example
from tests._shared import SHARED_TEMPLATES

TEMPLATES = SHARED_TEMPLATES

CHAT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call00001", "function": {"name": "calc", "arguments": '{"x": "2+2"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call00001", "content": "4"},
        {"role": "assistant", "content": "It is 4."},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "You are welcome."},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "calc",
                "description": "Evaluate arithmetic.",
                "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
            },
        }
    ],
}


HERMES_CALL = '<tool_call>\n{"name": "calc", "arguments": {"x": "2+2"}}\n</tool_call><|im_end|>\n'


def _runs(tok, rendered) -> list[str]:
    """Decoded maximal runs of masked tokens, in order."""
    runs, cur = [], []
    for token, keep in zip(rendered.ids, rendered.mask, strict=True):
        if keep:
            cur.append(token)
        elif cur:
            runs.append(tok.decode(cur))
            cur = []
    if cur:
        runs.append(tok.decode(cur))
    return runs


def _call(arguments: str) -> dict:
    return {"function": {"name": "calc", "arguments": arguments}}


# ----- config
@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("lora_r", 0, "lora_r=0"),
        ("lora_alpha", -1.0, "lora_alpha"),
        ("lora_dropout", 1.0, "lora_dropout"),
        ("max_steps", 0, "max_steps"),
        ("scheduler", "warp", "use one of 'constant'"),
        ("precision", "int3", "use one of 'auto'"),
        ("overflow", "wrap", "'truncate', 'drop'"),
        ("target_modules", [], "target_modules"),
        ("batch_size", 0, "batch_size"),
        ("adapter", "__base__", "adapter"),
        ("learning_rate", float("nan"), "learning_rate"),
        ("dataset", 5, "a .json/.jsonl path or a list of dict rows"),
    ],
)
def test_bad_config_fields_name_the_field(field, value, needle):
    kwargs = {"adapter": "x", "dataset": [{"text": "hi"}], field: value}
    with pytest.raises(ConfigError, match=needle):
        TrainingConfig(**kwargs)


def test_a_misspelt_keyword_is_a_config_error_naming_the_field_meant():
    """TrainingConfig(learning_rte=1e-4) raised attrs' bare TypeError, with no hint."""
    with pytest.raises(ConfigKeywordError) as caught:
        TrainingConfig(adapter="x", dataset=[{"text": "hi"}], learning_rte=1e-4)
    message = str(caught.value)
    assert "TrainingConfig got an unknown keyword 'learning_rte'" in message
    assert "did you mean 'learning_rate'?" in message
    assert "Valid keywords: adapter, dataset" in message
    assert isinstance(caught.value, ConfigError)
    assert isinstance(caught.value, Mp13Error)
    with pytest.raises(TypeError, match="did you mean 'lora_r'"):  # as it was caught
        TrainingConfig(adapter="x", dataset=[{"text": "hi"}], lora_rr=8)


def test_validation_settings_that_would_be_ignored_are_refused():
    """eval_every without validation data computed no eval loss, silently; validation and
    validation_split together silently ignored the split."""
    rows = [{"text": "hi"}]
    with pytest.raises(ConfigError, match=r"eval_every=5 needs validation data.*validation_split"):
        TrainingConfig(adapter="x", dataset=rows, eval_every=5)
    with pytest.raises(ConfigError, match=r"both validation and validation_split=0.2; set one"):
        TrainingConfig(adapter="x", dataset=rows, validation=rows, validation_split=0.2)
    assert TrainingConfig(adapter="x", dataset=rows, eval_every=5, validation=rows).eval_every == 5
    assert TrainingConfig(adapter="x", dataset=rows, eval_every=5, validation_split=0.5)


def test_overwrite_is_an_opt_in_flag():
    rows = [{"text": "hi"}]
    assert TrainingConfig(adapter="x", dataset=rows).overwrite is False
    assert TrainingConfig(adapter="x", dataset=rows, overwrite=True).overwrite is True
    with pytest.raises(ConfigError, match="overwrite"):
        TrainingConfig(adapter="x", dataset=rows, overwrite="yes")


def test_config_to_dict_is_json(tmp_path):
    cfg = TrainingConfig(adapter="x", dataset=[{"text": "a"}] * 3, target_modules=["q_proj"])
    out = config_to_dict(cfg)
    assert out["dataset"] == "<3 rows>" and out["target_modules"] == ["q_proj"]
    json.dumps(out)
    assert config_to_dict(TrainingConfig(adapter="x", dataset=tmp_path))["dataset"] == str(tmp_path)
    # Written at the end of every job: it must not rerun the cross-field checks on a copy.
    evaluated = TrainingConfig(adapter="x", dataset=[{"text": "a"}], validation=[{"text": "b"}])
    out = config_to_dict(attrs.evolve(evaluated, eval_every=2))
    assert (out["validation"], out["eval_every"]) == ("<1 rows>", 2)


# ----- datasets
def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        load_examples(tmp_path / "nope.jsonl")
    with pytest.raises(DatasetError, match="is a folder, not a file"):
        load_examples(tmp_path)
    (tmp_path / "latin1.jsonl").write_bytes(b'{"text": "caf\xe9"}\n')  # a bare UnicodeDecodeError
    with pytest.raises(DatasetError, match=r"cannot read .*latin1.jsonl.*must be UTF-8 JSON"):
        load_examples(tmp_path / "latin1.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{not json\n')
    with pytest.raises(DatasetError, match="line 2"):
        load_examples(bad)
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(DatasetError, match="empty"):
        load_examples(empty)
    shapes = [
        ("broken.json", "[{", "is not valid JSON"),
        ("two.json", '{"train": [], "test": []}', "exactly one list of rows"),
        ("scalar.json", "5", "must hold a JSON list of rows"),
        # One row saved as a .json file: its messages are not a list of rows.
        ("chat.json", '{"messages": [{"role": "user", "content": "q"}]}', "holds one row, not"),
        ("pair.json", '{"prompt": "q", "completion": "a"}', r"put it in a list \(\[\{"),
    ]
    for name, text, needle in shapes:
        (tmp_path / name).write_text(text)
        with pytest.raises(DatasetError, match=needle) as err:
            load_examples(tmp_path / name)
        assert name in str(err.value)


def test_tool_calls_in_training_rows_are_normalised_ids_kept_only_when_given():
    chat = [
        {"role": "user", "content": "2+2 and 3+3?"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "function": {"name": "calc", "arguments": '{"x": "2+2"}'}},
                _call(" "),  # no id; blank arguments are no arguments
            ],
        },
    ]
    (example,) = load_examples([{"messages": chat}])
    assert example.messages[1]["tool_calls"] == [
        {"type": "function", "function": {"name": "calc", "arguments": {"x": "2+2"}}, "id": "c1"},
        {"type": "function", "function": {"name": "calc", "arguments": {}}},
    ]


def test_chats_take_the_roles_a_request_takes():
    from mp13_engine._request_fields import ROLES

    for role in ROLES:
        chat = [{"role": role, "content": "x"}, {"role": "assistant", "content": "y"}]
        assert load_examples([{"messages": chat}])[0].messages[0]["role"] == role
    with pytest.raises(DatasetError) as err:
        load_examples([{"messages": [{"role": "wizard", "content": "hi"}]}])
    assert all(role in str(err.value) for role in ROLES)


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("just text", "not an object"),
        ({"foo": 1}, "unrecognised keys"),
        ({"messages": []}, "non-empty list"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "at least one assistant"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "has role 'wizard'; it needs a role"),
        (
            {"messages": [{"content": "hi"}]},
            "message 0 has no role; it needs a role, one of system",
        ),
        ({"messages": ["hi"]}, 'message 0 is a str, not an object; it needs a "role"'),
        ({"messages": [{"role": "assistant", "content": 3}]}, "content must be a string"),
        ({"prompt": "a"}, "completion"),
        ({"text": ""}, "non-empty"),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}]},
            "tool call needs",
        ),
        ({"messages": [{"role": "assistant"}]}, "message 0 has no content"),
        # Typos of a key the row lacks: said, not left out of the chat silently.
        (
            {"messages": CHAT["messages"], "tool": []},
            "unknown key 'tool' \\(did you mean 'tools'\\?\\)",
        ),
        (
            {"messages": CHAT["messages"], "Tools": []},
            "unknown key 'Tools' \\(did you mean 'tools'\\?\\)",
        ),
        (
            {"messages": [{"role": "assistant", "contents": "hi"}]},
            "no content \\(and no tool_calls\\); it has 'contents' \\(did you mean 'content'\\?\\)",
        ),
        (
            {"messages": [{"role": "assistant", "tool_calls": [_call('{"x": ')]}]},
            "arguments are not valid JSON",
        ),
        (
            {"messages": [{"role": "assistant", "tool_calls": [_call("[1, 2]")]}]},
            "arguments must be an object",
        ),
        ({**CHAT, "tools": "calc"}, '"tools" must be a list'),
    ],
)
def test_wrong_shaped_rows(row, needle):
    with pytest.raises(DatasetError, match=needle):
        load_examples([{"text": "fine"}, row])
    with pytest.raises(DatasetError, match="row 1"):
        load_examples([{"text": "fine"}, row])


def test_keys_a_dataset_carries_besides_a_row_are_not_typos():
    """Extra columns (ids, sources) stay allowed; a key close to one the row has is no typo."""
    row = {**CHAT, "prompt_id": "p1", "id": 3, "source": "web", "tools": None}
    assert to_example("row 0", row).kind is ExampleKind.MESSAGES


def test_json_and_jsonl_files(tmp_path):
    rows = [{"text": "a"}, {"prompt": "p", "completion": "c"}, CHAT]
    (tmp_path / "d.json").write_text(json.dumps({"rows": rows}))
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    a, b = load_examples(tmp_path / "d.json"), load_examples(tmp_path / "d.jsonl")
    assert a == b
    assert [e.kind.value for e in a] == ["text", "completion", "messages"]
    # Tool-call arguments given as a JSON string become a dict for the template.
    call = a[2].messages[2]["tool_calls"][0]
    assert call["function"]["arguments"] == {"x": "2+2"}


@given(n=st.integers(2, 40), fraction=st.floats(0.01, 0.5), seed=st.integers(0, 5))
@settings(max_examples=30, deadline=None)
def test_split_partitions_rows(n, fraction, seed):
    examples = [to_example(f"r{i}", {"text": f"row {i}"}) for i in range(n)]
    train, val = split(examples, fraction, seed)
    assert len(train) + len(val) == n and val and train
    assert sorted(e.text for e in train + val) == sorted(e.text for e in examples)
    assert split(examples, fraction, seed) == (train, val)


def test_a_split_that_leaves_no_training_row_says_so():
    two = [to_example(f"r{i}", {"text": f"row {i}"}) for i in range(2)]
    with pytest.raises(
        DatasetError, match=r"validation_split=0.9 leaves no training rows out of 2"
    ):
        split(two, 0.9, 0)


# ----- loss masks, token by token
@pytest.mark.parametrize(
    ("family", "ends"),
    [("chatml", "<|im_end|>\n"), ("llama3", "<|eot_id|>"), ("granite", "<|end_of_text|>\n")],
)
def test_assistant_mask_on_tiny_families(tiny_model_factory, family, ends):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_factory(family))
    simple = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "And now?"},
            {"role": "assistant", "content": "Goodbye."},
        ]
    }
    rendered = render_example(tok, to_example("r", simple))
    assert len(rendered.ids) == len(rendered.mask)
    assert _runs(tok, rendered) == [f"Hello!{ends}", f"Goodbye.{ends}"]
    everything = render_example(tok, to_example("r", simple), loss_on="all")
    assert all(everything.mask) and everything.ids == rendered.ids


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (
            "hermes",
            [
                HERMES_CALL,
                "It is 4.<|im_end|>\n",
                "You are welcome.<|im_end|>\n",
            ],
        ),
        (
            "llama3_json",
            [
                '{"name": "calc", "parameters": {"x": "2+2"}}<|eot_id|>',
                "It is 4.<|eot_id|>",
                "You are welcome.<|eot_id|>",
            ],
        ),
        (
            # Qwen3 renders earlier assistant turns without the empty think block: the mask
            # still covers exactly each assistant turn as it appears in the full chat.
            "qwen3",
            [
                HERMES_CALL,
                "It is 4.<|im_end|>\n",
                "<think>\n\n</think>\n\nYou are welcome.<|im_end|>\n",
            ],
        ),
    ],
)
def test_assistant_mask_with_tool_calls_on_real_templates(tiny_model_path, template, expected):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    tok.chat_template = (TEMPLATES / f"{template}.jinja").read_text()
    rendered = render_example(tok, to_example("r", CHAT))
    assert _runs(tok, rendered) == expected
    # Nothing outside the assistant turns is learned: user/tool/system text is unmasked.
    learned = "".join(_runs(tok, rendered))
    for text in ("What is 2+2?", "thanks", "Be brief.", "Evaluate arithmetic."):
        assert text not in learned


DS_END = "<｜end▁of▁sentence｜>"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (
            # DeepSeek V3 indents its output and ends the document with a newline, so the
            # turns render with different whitespace once more messages follow: every turn
            # is still learned, not only the last. (The tiny tokenizer merges the layout
            # space before "<" and "You" into one token, which the turn owns.)
            "deepseek_v3",
            [
                " <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>calc\n"
                '```json\n{"x": "2+2"}\n```<｜tool▁call▁end｜>        <｜tool▁calls▁end｜>'
                + DS_END,
                "It is 4." + DS_END,
                " You are welcome." + DS_END + "\n",
            ],
        ),
        (
            "deepseek_v31",
            [
                '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>calc<｜tool▁sep｜>{"x": "2+2"}'
                "<｜tool▁call▁end｜><｜tool▁calls▁end｜>" + DS_END,
                "It is 4." + DS_END,
                "You are welcome." + DS_END,
            ],
        ),
    ],
)
def test_assistant_mask_on_deepseek_templates(tiny_model_path, template, expected):
    from transformers import AutoTokenizer

    from mp13_engine.toolcalls._messages import prepare_messages

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    tok.chat_template = (TEMPLATES / f"{template}.jinja").read_text()

    def prepare(messages, tools):  # as serving adapts the calls (V3.1 wants JSON text)
        return prepare_messages(messages, template, tok.chat_template), tools

    rendered = render_example(tok, to_example("r", CHAT), prepare=prepare)
    assert _runs(tok, rendered) == expected
    learned = "".join(_runs(tok, rendered))
    for text in ("What is 2+2?", "thanks", "Be brief.", "Evaluate arithmetic.", "tool▁output"):
        assert text not in learned


def test_prompt_completion_and_text_masks(tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    rendered = render_example(tok, to_example("r", {"prompt": "Q: 2+2?\nA:", "completion": " 4"}))
    assert tok.decode(rendered.ids) == f"Q: 2+2?\nA: 4{tok.eos_token}"
    assert _runs(tok, rendered) == [f" 4{tok.eos_token}"]
    text = render_example(tok, to_example("r", {"text": "plain words"}))
    assert all(text.mask) and tok.decode(text.ids) == f"plain words{tok.eos_token}"


def test_chat_rows_a_template_cannot_render_say_why(tiny_model_path):
    from transformers import AutoTokenizer

    from mp13_engine import ChatTemplateError

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    chat = to_example("r", CHAT)
    tok.chat_template = None
    with pytest.raises(ChatTemplateError, match=r"no chat template.*Use prompt/completion or text"):
        render_example(tok, chat)
    tok.chat_template = "{{ raise_exception('Conversation roles must alternate') }}"
    with pytest.raises(DatasetError, match="could not render a training chat: Conversation roles"):
        render_example(tok, chat)


def test_a_chat_that_opens_with_the_assistant_learns_every_assistant_turn(tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    chat = [
        {"role": "assistant", "content": "Hello, how can I help?"},
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi."},
    ]
    rendered = render_example(tok, to_example("r", {"messages": chat}))
    runs = _runs(tok, rendered)
    assert len(runs) == 2
    assert "Hello, how can I help?" in runs[0] and "Hi." in runs[1]
    assert "Say hi." not in "".join(runs)


def test_an_assistant_turn_the_template_drops_teaches_nothing(tiny_model_path):
    """A template that skips empty messages renders no text for an empty assistant turn:
    that turn adds no loss, and the later turn is still learned exactly."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    tok.chat_template = (
        "{% for m in messages %}{% if m.content %}<{{ m.role }}>{{ m.content }}</s>{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    chat = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "ok"},
    ]
    rendered = render_example(tok, to_example("r", {"messages": chat}))
    assert tok.decode(rendered.ids) == "<user>hi</s><user>again</s><assistant>ok</s>"
    assert _runs(tok, rendered) == ["ok</s>"]


def test_resume_with_changes_without_resume_from_is_refused():
    """The override applies only to a resume; alone it would be ignored, silently."""
    rows = [{"text": "hi"}]
    with pytest.raises(ConfigError, match=r"resume_with_changes=True only applies when resuming"):
        TrainingConfig(adapter="x", dataset=rows, resume_with_changes=True)
    assert TrainingConfig(
        adapter="x", dataset=rows, resume_from="latest", resume_with_changes=True
    ).resume_with_changes


def test_a_large_jsonl_names_its_first_bad_line_and_keeps_separators_in_strings(tmp_path):
    """A .jsonl is read a line at a time (not whole, then split): a bad row deep in a 20,000-row
    file is named by its line; U+2028 inside a JSON string, which str.splitlines cut the row
    at ("not valid JSON"), is text; bad UTF-8 is named by its line too."""
    good = json.dumps({"prompt": "q", "completion": "a"})
    lines = [good] * 20_000
    lines[14_999] = json.dumps({"messages": [{"role": "user", "content": "q"}]})
    big = tmp_path / "big.jsonl"
    big.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"big\.jsonl line 15000: a chat needs at least one"):
        load_examples(big)
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({"text": "one\u2028two\x85three"}, ensure_ascii=False) + "\n")
    assert [e.text for e in load_examples(odd)] == ["one\u2028two\x85three"]
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(f"{good}\n{good}\n".encode() + b'{"text": "caf\xe9"}\n')
    with pytest.raises(DatasetError, match=r"latin\.jsonl' at line 3 \(UnicodeDecodeError"):
        load_examples(latin)


@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=6),
    st.integers(-2, 70),
)
def test_span_test_is_membership_in_any_span(spans, pos):
    """The assistant mask's bisection agrees with a scan of every span, overlaps included."""
    from mp13_engine._training._render import span_test

    assert span_test(spans)(pos) == any(s <= pos < e for s, e in spans)


def test_rendered_rows_are_compact_buffers_and_batch_as_tuples_did(tiny_model_path):
    """A job holds every row for its whole run: 4 bytes an id and 1 a mask entry (tuples of
    Python ints took about 44 bytes a token), and the batch built from them is the one the
    tuples gave (so losses do not change)."""
    import sys

    import torch
    from transformers import AutoTokenizer

    from mp13_engine._training._render import TrainingRow
    from mp13_engine._training._trainer import batches

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    rows = [
        render_example(tok, to_example("r", CHAT)),
        render_example(tok, to_example("r", {"prompt": "Q: 2+2?\nA:", "completion": " 4"})),
    ]
    for row in rows:
        assert (row.ids.itemsize, row.mask.itemsize) == (4, 1)
        assert sys.getsizeof(row.ids) + sys.getsizeof(row.mask) < 200 + 5 * len(row.ids)
    # Any int sequence converts (the demo builds rows from tuples); rows compare by value.
    as_tuples = [TrainingRow(tuple(r.ids), tuple(r.mask)) for r in rows]
    assert as_tuples == rows and as_tuples[0].ids.typecode == rows[0].ids.typecode
    assert rows[0].n_loss == sum(tuple(rows[0].mask)) > 0

    got = batches(rows, 0, torch.device("cpu"))
    width = max(len(r.ids) for r in rows)
    for i, row in enumerate(rows):
        ids, mask, pad = list(row.ids), list(row.mask), width - len(row.ids)
        assert got["input_ids"][i].tolist() == ids + [0] * pad
        assert got["attention_mask"][i].tolist() == [1] * len(ids) + [0] * pad
        labels = [t if m else -100 for t, m in zip(ids, mask, strict=True)] + [-100] * pad
        assert got["labels"][i].tolist() == labels
    assert all(t.dtype == torch.long for t in got.values())
