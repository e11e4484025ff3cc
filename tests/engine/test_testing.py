# SPDX-License-Identifier: Apache-2.0
"""Tests of ``mp13_engine.testing``: offline tiny models are deterministic, loadable, usable.

Templates: the tiny families' own chat templates must render exactly what the real upstream
templates do. The real ones ship in ``tests/templates`` (public data; sources and
licences in its README). Both are rendered by transformers' own renderer with the same
tokenizer. Documented normalisation, for granite only: the upstream Granite 3.3 template prints
an assistant message's ``content`` and the raw role, so before rendering with it, assistant
``tool_calls`` are written into ``content`` as ``<|tool_call|>[...]`` and role ``tool`` becomes
``tool_response`` (what our template does itself). For chatml, upstream Hermes needs a tools list,
so "no tools" is passed to it as ``[]`` (ours accepts ``None`` too).
"""

from __future__ import annotations

import copy
import hashlib
import json
import pathlib
import re
import time
import unicodedata

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from mp13_engine import ConfigError
from mp13_engine.testing import (
    DEMO_PROMPTS,
    DEMO_VERSION,
    FAMILIES,
    TINY_FAMILIES,
    build_demo_model,
    build_tiny_encoder,
    build_tiny_model,
    build_tokenizer,
    demo_model_path,
    demo_tools,
    tiny_model_path,
)
from mp13_engine.testing._demo import shipped_demo_model
from tests._shared import SHARED_TEMPLATES


def _digests(path: pathlib.Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.iterdir())}


def test_same_seed_gives_byte_identical_files(tmp_path: pathlib.Path) -> None:
    a = build_tiny_model(tmp_path / "a", seed=3)
    b = build_tiny_model(tmp_path / "b", seed=3)
    c = build_tiny_model(tmp_path / "c", seed=4)
    assert _digests(a) == _digests(b)
    assert _digests(a)["model.safetensors"] != _digests(c)["model.safetensors"]
    assert _digests(a)["tokenizer.json"] == _digests(c)["tokenizer.json"]


def test_build_leaves_global_rng_untouched(tmp_path: pathlib.Path) -> None:
    before = torch.random.get_rng_state()
    build_tiny_model(tmp_path / "m")
    assert torch.equal(before, torch.random.get_rng_state())


@pytest.mark.parametrize(
    ("kwargs", "word"), [({"family": "nope"}, "family"), ({"size": "xl"}, "size")]
)
def test_unknown_family_or_size_is_a_config_error(
    tmp_path: pathlib.Path, kwargs: dict[str, str], word: str
) -> None:
    with pytest.raises(ConfigError, match=word) as info:
        build_tiny_model(tmp_path, **kwargs)
    assert "chatml" in str(info.value) or "tiny" in str(info.value)


def test_bad_build_settings_are_refused_before_anything_is_written(tmp_path: pathlib.Path) -> None:
    from mp13_engine.testing import FamilySpec

    for std in (0, -0.1, float("nan")):
        with pytest.raises(ConfigError, match="init_std must be a positive float, got"):
            build_tiny_model(tmp_path / "m", init_std=std)
    assert not (tmp_path / "m").exists()
    with pytest.raises(ValueError, match=r"family 'odd': \['</s>'\] must be listed in control"):
        FamilySpec(
            name="odd",
            model_type="llama",
            template="chatml.jinja",
            control_tokens=("<pad>",),
            markup_tokens=(),
            eos_token="</s>",
            pad_token="<pad>",
            end_of_turn=(),
        )


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_family_loads_offline_and_generates(tiny_model_factory, family: str) -> None:
    path = tiny_model_factory(family)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert out.shape == (1, ids.shape[1] + 5)
    assert model.config.vocab_size == len(tok)


@pytest.fixture(scope="module")
def tokenizers() -> dict:
    return {family: build_tokenizer(family) for family in TINY_FAMILIES}


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_special_and_markup_tokens_are_single_ids(tokenizers, family: str) -> None:
    spec = FAMILIES[family]
    tok = tokenizers[family]
    for token in (*spec.control_tokens, *spec.markup_tokens):
        ids = tok(token, add_special_tokens=False).input_ids
        assert len(ids) == 1, token
        assert tok.convert_ids_to_tokens(ids) == [token]
    # Control tokens vanish with skip_special_tokens; tool markup stays for the parsers.
    text = "".join(spec.markup_tokens) + "x" + spec.eos_token
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids, skip_special_tokens=True) == "".join(spec.markup_tokens) + "x"


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_saved_model_knows_its_end_of_turn_and_bos(tiny_model_factory, family: str) -> None:
    spec = FAMILIES[family]
    path = tiny_model_factory(family)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    gen = GenerationConfig.from_pretrained(path, local_files_only=True)
    assert tok.eos_token == spec.eos_token
    assert tok.pad_token == spec.pad_token
    assert set(gen.eos_token_id) == {tok.convert_tokens_to_ids(t) for t in spec.end_of_turn}
    assert tok.eos_token_id in gen.eos_token_id
    with_bos = tok("hi").input_ids
    without = tok("hi", add_special_tokens=False).input_ids
    if spec.add_bos:
        assert with_bos == [tok.bos_token_id, *without]
    else:
        assert with_bos == without
    assert tok.chat_template == spec.chat_template()


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=80))
@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_any_text_round_trips(tokenizers, family: str, text: str) -> None:
    tok = tokenizers[family]
    if FAMILIES[family].pipeline == "qwen2":
        text = unicodedata.normalize("NFC", text)  # Qwen tokenizers NFC-normalise (upstream too)
    for marker in (*FAMILIES[family].control_tokens, *FAMILIES[family].markup_tokens):
        text = text.replace(marker, "")
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids) == text


def test_build_is_fast(tmp_path: pathlib.Path) -> None:
    build_tiny_model(tmp_path / "warm")  # first call pays for imports
    start = time.perf_counter()
    build_tiny_model(tmp_path / "timed", family="llama3")
    assert time.perf_counter() - start < 3.0


def test_building_prints_nothing_and_leaves_later_bars_alone(
    tmp_path: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """transformers' "Writing model shards" bar used to print for every tiny model a test,
    benchmark or example built; a model loaded afterwards still shows its own bars."""
    from transformers.utils import logging as hf_logging

    build_tiny_model(tmp_path / "causal")
    build_tiny_encoder(tmp_path / "encoder")
    assert capfd.readouterr().err == ""
    seen: list[dict[str, object]] = []

    def spy(factory, args, kwargs):
        seen.append(kwargs)
        return factory(*args, **kwargs)

    previous = hf_logging.set_tqdm_hook(spy)
    try:
        AutoModelForCausalLM.from_pretrained(tmp_path / "causal", local_files_only=True)
    finally:
        hf_logging.set_tqdm_hook(previous)
    assert seen and not any(kwargs.get("disable") for kwargs in seen)


def test_small_size_has_a_few_million_parameters(tmp_path: pathlib.Path) -> None:
    path = build_tiny_model(tmp_path, size="small")
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    assert 1_000_000 < model.num_parameters() < 10_000_000
    assert model.config.hidden_size == 256


def test_model_without_chat_template(tmp_path: pathlib.Path) -> None:
    path = build_tiny_model(tmp_path, chat_template=False)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    assert tok.chat_template is None
    assert not (path / "chat_template.jinja").exists()
    with pytest.raises(ValueError, match="chat_template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)


def test_encoder_is_not_a_causal_lm(tmp_path: pathlib.Path) -> None:
    path = build_tiny_encoder(tmp_path)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    assert config.model_type == "distilbert"
    with pytest.raises(ValueError, match="Unrecognized configuration"):
        AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    assert AutoTokenizer.from_pretrained(path, local_files_only=True)("hi").input_ids


@pytest.mark.slow
@pytest.mark.parametrize("family", ["chatml", "llama3"])
def test_lora_can_memorise_six_answers(tiny_model_factory, family: str) -> None:
    """The large init makes the tiny model trainable: a LoRA on all linear layers (the output
    layer stays frozen) learns six short answers in 150 steps."""
    from peft import LoraConfig, get_peft_model

    path = tiny_model_factory(family)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    pairs = [
        ("What is your name?", "My name is Tiny."),
        ("Favourite colour?", "Blue, always blue."),
        ("Capital of France?", "Paris is the capital."),
        ("What is 2+2?", "It is four."),
        ("Say hi", "Hi there, friend!"),
        ("Best pet?", "A cat, of course."),
    ]
    rows = []
    for question, answer in pairs:
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
        )
        prompt_ids = tok(prompt, add_special_tokens=False).input_ids
        answer_ids = [*tok(answer, add_special_tokens=False).input_ids, tok.eos_token_id]
        rows.append((prompt_ids, answer_ids))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        peft_model = get_peft_model(
            model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0)
        )
    params = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2)
    for step in range(150):
        for prompt_ids, answer_ids in rows[step % 2 :: 2]:
            ids = torch.tensor([prompt_ids + answer_ids])
            labels = torch.tensor([[-100] * len(prompt_ids) + answer_ids])
            (peft_model(input_ids=ids, labels=labels).loss / 3).backward()
        opt.step()
        opt.zero_grad()
    for (prompt_ids, answer_ids), (_, answer) in zip(rows, pairs, strict=True):
        out = peft_model.generate(
            torch.tensor([prompt_ids]), max_new_tokens=len(answer_ids) + 2, do_sample=False
        )
        assert tok.decode(out[0, len(prompt_ids) :], skip_special_tokens=True) == answer


# --- chat templates against the real ones -----------------------------------------------

REAL_DIR = SHARED_TEMPLATES

REAL = {
    "chatml": "hermes.jinja",
    "qwen3": "qwen3.jinja",
    "llama3": "llama3_json.jinja",
    "mistral": "mistral.jinja",
    "granite": "granite.jinja",
    "smollm2": "smollm2.jinja",
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "u"},
                "days": {"type": "array", "items": {"type": "integer"}, "description": " n "},
            },
            "required": ["location"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "current_time",
        "description": "Return the current time.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def _call(name: str, args: dict, call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


SYSTEM = {"role": "system", "content": "You are a terse assistant."}
TOOL_ROUND = [
    SYSTEM,
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [_call("get_weather", {"location": "Paris", "unit": "celsius"}, "call00001")],
    },
    {"role": "tool", "tool_call_id": "call00001", "content": '{"temperature": 21}'},
    {"role": "assistant", "content": "It is 21 degrees."},
    {"role": "user", "content": "Thanks! And the time, ünïcödé 🎉?"},
]
TWO_CALLS = [
    {"role": "user", "content": "Weather and time?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            _call("get_weather", {"location": "Oslo"}, "call00002"),
            _call("current_time", {}, "call00003"),
        ],
    },
    {"role": "tool", "tool_call_id": "call00002", "content": "snow"},
    {"role": "tool", "tool_call_id": "call00003", "content": "12:30"},
]
PLAIN = [
    SYSTEM,
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "Tell me a joke."},
]
USER_ONLY = [{"role": "user", "content": "Hi"}]

# (id, messages, tools, extra template kwargs)
CASES = [
    ("tool-round", TOOL_ROUND, [WEATHER, CLOCK], {}),
    ("two-calls", TWO_CALLS, [WEATHER, CLOCK], {}),
    ("plain", PLAIN, None, {}),
    ("plain-with-tools", PLAIN, [CLOCK], {}),
    ("user-only", USER_ONLY, None, {}),
]
SKIP = {
    # Llama 3 supports exactly one call per assistant turn (the real template raises).
    ("llama3", "two-calls"),
}


def _granite_upstream_messages(messages: list[dict]) -> list[dict]:
    out = []
    for message in copy.deepcopy(messages):
        if message.get("tool_calls"):
            calls = [
                {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in message.pop("tool_calls")
            ]
            text = (message.get("content") or "") + "<|tool_call|>" + json.dumps(calls)
            message["content"] = text
        if message["role"] == "tool":
            message["role"] = "tool_response"
        out.append(message)
    return out


def _render(tok, messages, tools, template=None, **kwargs) -> str:
    return tok.apply_chat_template(
        messages,
        tools=tools,
        tokenize=False,
        add_generation_prompt=True,
        chat_template=template,
        **kwargs,
    )


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize(("case", "messages", "tools", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_template_matches_the_real_one(family, case, messages, tools, kwargs) -> None:
    if (family, case) in SKIP:
        pytest.skip("not supported by this family's real format")
    tok = build_tokenizer(family)
    real_text = (REAL_DIR / REAL[family]).read_text(encoding="utf-8")
    real_messages = _granite_upstream_messages(messages) if family == "granite" else messages
    # Upstream Hermes iterates ``tools`` unguarded: "no tools" is an empty list there.
    real_tools = [] if family == "chatml" and tools is None else tools
    ours = _render(tok, messages, tools, **kwargs)
    real = _render(tok, real_messages, real_tools, template=real_text, **kwargs)
    assert ours == real


@pytest.mark.parametrize(
    "kwargs", [{}, {"enable_thinking": False}], ids=["thinking", "no-thinking"]
)
def test_qwen3_reasoning_matches_the_real_one(kwargs) -> None:
    tok = build_tokenizer("qwen3")
    messages = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "6", "reasoning_content": "add again"},
    ]
    real_text = (REAL_DIR / "qwen3.jinja").read_text(encoding="utf-8")
    for upto in (3, 4):
        ours = _render(tok, messages[:upto], None, **kwargs)
        assert ours == _render(tok, messages[:upto], None, template=real_text, **kwargs)


def test_llama3_tools_in_system_message_matches_the_real_one() -> None:
    tok = build_tokenizer("llama3")
    real_text = (REAL_DIR / "llama3_json.jinja").read_text(encoding="utf-8")
    kwargs = {"tools_in_user_message": False, "date_string": "01 Jan 2025"}
    ours = _render(tok, TOOL_ROUND, [WEATHER], **kwargs)
    assert ours == _render(tok, TOOL_ROUND, [WEATHER], template=real_text, **kwargs)
    assert "Today Date: 01 Jan 2025" in ours


def test_chatml_template_renders_nullable_types(tokenizers) -> None:
    """Upstream Hermes recurses forever on ``["string", "null"]``; ours renders it."""
    tool = {
        "type": "function",
        "function": {
            "name": "current_time",
            "description": "Now.",
            "parameters": {
                "type": "object",
                "properties": {"tz": {"type": ["string", "null"], "description": "zone"}},
            },
        },
    }
    text = _render(tokenizers["chatml"], USER_ONLY, [tool])
    assert "current_time(tz: Union[str,None])" in text


# --- the demo model -----------------------------------------------------------------------


def test_tiny_model_path_builds_once_into_the_cache(tmp_path: pathlib.Path, monkeypatch) -> None:
    monkeypatch.setenv("MP13_CACHE", str(tmp_path / "cache"))
    path = tiny_model_path("chatml", seed=0)
    assert path.parent == tmp_path / "cache" and path.name.startswith("tiny-chatml-0-")
    weights = path / "model.safetensors"
    built = weights.stat().st_mtime_ns
    assert tiny_model_path("chatml", seed=0) == path  # reused, not rebuilt
    assert weights.stat().st_mtime_ns == built
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no build left aside
    assert tiny_model_path("chatml", seed=0, cache_dir=tmp_path / "other").parent == (
        tmp_path / "other"
    )


def test_a_cache_that_cannot_be_written_or_a_build_that_loses_a_race(
    tmp_path: pathlib.Path,
) -> None:
    from mp13_engine import ModelLoadError
    from mp13_engine.testing._build import built_once

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ModelLoadError, match=r"cannot write mp13's model cache .*MP13_CACHE"):
        tiny_model_path("chatml", cache_dir=blocker)

    dest = tmp_path / "cache" / "model"

    def finished_first_elsewhere(folder: pathlib.Path) -> None:
        (folder / "model.safetensors").write_text("ours")
        dest.mkdir(parents=True)  # another process renames its build into place meanwhile
        (dest / "model.safetensors").write_text("theirs")

    assert built_once(dest, finished_first_elsewhere) == dest
    assert (dest / "model.safetensors").read_text() == "theirs"
    assert [p.name for p in dest.parent.iterdir()] == ["model"]  # ours was dropped

    def blocked(folder: pathlib.Path) -> None:
        (folder / "model.safetensors").write_text("ours")
        (dest.parent / "stuck").mkdir()
        (dest.parent / "stuck" / "half-written").write_text("")

    with pytest.raises(OSError, match="Directory not empty"):  # not a model: not taken as one
        built_once(dest.parent / "stuck", blocked)


def test_demo_model_path_reuses_a_built_model(tmp_path: pathlib.Path, monkeypatch) -> None:
    cached = tmp_path / f"demo-{DEMO_VERSION}"
    cached.mkdir()
    (cached / "model.safetensors").write_bytes(b"")
    assert demo_model_path(tmp_path) == cached
    monkeypatch.setenv("MP13_CACHE", str(tmp_path))
    assert demo_model_path() == cached


def test_shipped_demo_model_is_current_and_used_when_nothing_is_cached(
    tmp_path: pathlib.Path,
) -> None:
    # mp13chat starts in seconds only because the demo model ships; a recipe change
    # (DEMO_VERSION) without re-shipping (scripts/build_demo_model.py --ship) fails here.
    shipped = shipped_demo_model()
    assert shipped is not None, "run: python scripts/build_demo_model.py --ship"
    assert demo_model_path(tmp_path) == shipped
    cached = tmp_path / f"demo-{DEMO_VERSION}"
    cached.mkdir()
    (cached / "model.safetensors").write_bytes(b"")
    assert demo_model_path(tmp_path) == cached  # a user's own build wins over the shipped one


def test_shipped_demo_model_answers_its_trained_prompts() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mp13_engine.testing._demo_data import TRAINED_PROMPTS

    path = shipped_demo_model()
    assert path is not None
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    for prompt, expected in TRAINED_PROMPTS[:2]:
        assert _greedy(tok, model, [{"role": "user", "content": prompt}]) == expected


def _greedy(tok, model, messages: list[dict]) -> str:
    prompt = tok.apply_chat_template(
        messages, tools=demo_tools(), tokenize=False, add_generation_prompt=True
    )
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=80, do_sample=False)
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory):
    path = build_demo_model(tmp_path_factory.mktemp("demo"))
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return tok, AutoModelForCausalLM.from_pretrained(path, local_files_only=True)


@pytest.mark.slow
def test_demo_model_answers_its_trained_prompts(demo_model) -> None:
    tok, model = demo_model
    replies = {p: _greedy(tok, model, [{"role": "user", "content": p}]) for p, _ in DEMO_PROMPTS}
    assert replies == dict(DEMO_PROMPTS)


@pytest.mark.slow
def test_demo_model_calls_the_calculator_and_quotes_the_result(demo_model) -> None:
    tok, model = demo_model
    reply = _greedy(tok, model, [{"role": "user", "content": "what is 17*23?"}])
    match = re.fullmatch(r"\s*<tool_call>\s*(.*?)\s*</tool_call>\s*", reply, flags=re.S)
    assert match is not None, reply
    call = json.loads(match.group(1))
    assert call == {"name": "calculator", "arguments": {"expression": "17*23"}}
    function = {"name": "calculator", "arguments": call["arguments"]}
    messages = [
        {"role": "user", "content": "what is 17*23?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": function}]},
        {"role": "tool", "content": "391"},
    ]
    assert "391" in _greedy(tok, model, messages)


@pytest.mark.slow
def test_demo_model_calls_current_time(demo_model) -> None:
    tok, model = demo_model
    reply = _greedy(tok, model, [{"role": "user", "content": "what time is it?"}])
    match = re.fullmatch(r"\s*<tool_call>\s*(.*?)\s*</tool_call>\s*", reply, flags=re.S)
    assert match is not None, reply
    assert json.loads(match.group(1)) == {"name": "current_time", "arguments": {}}
