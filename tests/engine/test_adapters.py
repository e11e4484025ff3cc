# SPDX-License-Identifier: Apache-2.0
"""Adapters through the engine: PEFT format both ways, mixed waves, combinations, errors."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
import torch

from mp13_engine import AdapterError, AdapterInfo, Engine, FinishReason, Request
from mp13_engine._adapter_files import ADAPTER_FILES, METADATA_FILE

PROMPTS = ["Hello there", "What is a cat?", "Tell me a story", "Count to three", "Why?"]


def _peft_adapter(base_path: pathlib.Path, dest: pathlib.Path, seed: int, r: int = 4) -> None:
    """A plain-PEFT LoRA adapter with random (non-zero) weights, saved the PEFT way."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_path)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = get_peft_model(
            base,
            LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear", init_lora_weights=False),
        )
    model.save_pretrained(dest)


@pytest.fixture(scope="module")
def adapter_dirs(tiny_model_path, tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("adapters")
    _peft_adapter(tiny_model_path, root / "a", seed=1)
    _peft_adapter(tiny_model_path, root / "b", seed=2, r=2)
    return root


@pytest.fixture
def engine(tiny_model_path, adapter_dirs):
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dirs)) as eng:
        yield eng


def _req(prompt: str, adapters=None, n: int = 8) -> Request:
    return Request(
        messages=[{"role": "user", "content": prompt}], adapters=adapters, max_new_tokens=n
    )


def test_load_short_name_and_list(engine, adapter_dirs):
    info = engine.adapters.load("a")  # short name under adapters_dir
    assert isinstance(info, AdapterInfo)
    assert info.name == "a" and info.rank == 4 and info.alpha == 8.0
    assert pathlib.Path(info.path) == (adapter_dirs / "a").resolve()
    assert {"q_proj", "down_proj"} <= set(info.targets)
    engine.adapters.load(adapter_dirs / "b", name="other")
    assert [i.name for i in engine.adapters.list()] == ["a", "other"]


def test_adapter_changes_output_and_base_is_untouched(engine):
    base_before = engine.generate(_req(PROMPTS[0], adapters=[])).raw_text
    engine.adapters.load("a")
    with_a = engine.generate(_req(PROMPTS[0], adapters=["a"]))
    assert with_a.metrics.adapters == ("a",)
    assert with_a.raw_text != base_before
    assert engine.generate(_req(PROMPTS[0], adapters=["__base__"])).raw_text == base_before
    assert engine.generate(_req(PROMPTS[0])).raw_text == base_before  # no default set


def test_mixed_wave_equals_each_adapter_alone(engine):
    engine.adapters.load("a")
    engine.adapters.load("b")
    plan = [[], ["a"], ["b"], ["a"], ["b"], ["__base__"], ["a"], ["b"]]
    requests = [_req(PROMPTS[i % len(PROMPTS)], adapters=ad, n=10) for i, ad in enumerate(plan)]
    together = engine.generate_many(requests)
    assert max(r.metrics.batch_size for r in together) > 1  # they really shared waves
    alone = [engine.generate(r) for r in requests]
    for t, s in zip(together, alone, strict=True):
        assert t.finish_reason is s.finish_reason
        assert t.raw_text == s.raw_text


def test_engine_saved_adapter_loads_in_plain_peft(engine, tiny_model_path, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    engine.adapters.load("a")
    out = engine.adapters.save("a", tmp_path / "saved")
    assert (out / "adapter_config.json").is_file()
    assert (out / "adapter_model.safetensors").is_file()
    meta = json.loads((out / METADATA_FILE).read_text())
    assert meta["model_type"] == engine.model.get_base_model().config.model_type

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model_path), out
    )
    request = _req(PROMPTS[1], adapters=["a"], n=10)
    ids = tok(engine.format_prompt(request), add_special_tokens=False, return_tensors="pt")
    with torch.inference_mode():
        gen = peft_model.generate(**ids, max_new_tokens=10, do_sample=False)
    expected = gen[0, ids["input_ids"].shape[1] :].tolist()
    got = engine.generate(request)
    assert got.raw_text == tok.decode(expected, skip_special_tokens=True)


def test_several_adapters_add_their_deltas(engine, tiny_model_path, adapter_dirs):
    """["a", "b"] == PEFT with both adapters active (their deltas add)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    engine.adapters.load("a")
    engine.adapters.load("b")
    request = _req(PROMPTS[2], adapters=["b", "a"], n=10)
    combined = engine.generate(request)

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    ref = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    ref = PeftModel.from_pretrained(ref, adapter_dirs / "a", adapter_name="a")
    ref.load_adapter(adapter_dirs / "b", adapter_name="b")
    ref.base_model.set_adapter(["a", "b"])
    ids = tok(engine.format_prompt(request), add_special_tokens=False, return_tensors="pt")
    with torch.inference_mode():
        gen = ref.generate(**ids, max_new_tokens=10, do_sample=False)
    assert combined.raw_text == tok.decode(
        gen[0, ids["input_ids"].shape[1] :], skip_special_tokens=True
    )
    # Order does not matter and the combination is cached.
    assert (
        engine.generate(_req(PROMPTS[2], adapters=["a", "b"], n=10)).raw_text == combined.raw_text
    )


def test_set_default_applies_when_request_names_none(engine):
    engine.adapters.load("a")
    with_a = engine.generate(_req(PROMPTS[3], adapters=["a"])).raw_text
    base = engine.generate(_req(PROMPTS[3], adapters=[])).raw_text
    engine.adapters.set_default("a")
    assert engine.adapters.defaults == ("a",)
    assert engine.generate(_req(PROMPTS[3])).raw_text == with_a
    assert engine.generate(_req(PROMPTS[3], adapters=[])).raw_text == base
    with pytest.raises(AdapterError, match="nope"):
        engine.adapters.set_default(["nope"])
    for wrong in (5, ["a", 5], {"a"}):
        with pytest.raises(AdapterError, match="set_default takes an adapter name or a list"):
            engine.adapters.set_default(wrong)
    assert engine.adapters.defaults == ("a",)  # a refused call changes nothing


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda a: a.combine("ab"), "takes a list of adapter names, not 'ab'"),
        (lambda a: a.combine(["a", "b"], 2.0), "weights are a list of numbers, not 2.0"),
        (lambda a: a.combine(["a", "b"], [1.0, "x"]), r"finite numbers, got \[1.0, 'x'\]"),
        (lambda a: a.combine(["a", "b"], [1.0, float("nan")]), "weights are finite numbers"),
        (lambda a: a.load(5), "an adapter folder is a path .*, not int"),
        (lambda a: a.load("a", replace="no"), "replace is True or False, not 'no'"),
        (lambda a: a.save("a", None), "an adapter folder is a path .*, not NoneType"),
        (lambda a: a.unload(["a"]), r"Unknown adapter \['a'\]"),
        (lambda a: a.get(["a"]), r"Unknown adapter \['a'\]"),
    ],
)
def test_adapter_calls_with_wrong_types_are_adapter_errors(engine, call, match):
    with pytest.raises(AdapterError, match=match):
        call(engine.adapters)


def test_saving_onto_a_file_is_refused_and_leaves_the_file(engine, tmp_path):
    engine.adapters.load("a")
    taken = tmp_path / "notes.txt"
    taken.write_text("mine", encoding="utf-8")
    with pytest.raises(AdapterError, match="it is a file; give a folder"):
        engine.adapters.save("a", taken)
    assert taken.read_text(encoding="utf-8") == "mine"
    assert (engine.adapters.save("a", tmp_path / "a-copy") / "adapter_config.json").exists()


def test_saving_under_a_file_is_an_adapter_error_and_the_engine_goes_on(engine, tmp_path):
    """Used to raise a bare NotADirectoryError out of the worker."""
    engine.adapters.load("a")
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(AdapterError, match=r"failed: .*Give a folder that can be written"):
        engine.adapters.save("a", tmp_path / "notes.txt" / "sub")
    assert engine.generate(_req(PROMPTS[0], adapters=["a"])).ok
    with pytest.raises(AdapterError, match="overwrite is True or False, not 'yes'"):
        engine.adapters.save("a", tmp_path / "x", overwrite="yes")


def test_saving_over_another_adapters_folder_is_refused_unless_overwrite(engine, tmp_path):
    """Saving b into a's folder used to replace a's weights silently and keep a's metadata."""
    engine.adapters.load("a")
    engine.adapters.load("b")
    folder = engine.adapters.save("a", tmp_path / "a-saved")
    meta_file = folder / METADATA_FILE
    meta_file.write_text(json.dumps({**json.loads(meta_file.read_text()), "note": "a's"}))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(AdapterError, match=r"already holds another saved adapter.*overwrite=True"):
        engine.adapters.save("b", folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing lost
    assert engine.adapters.get("b").path != str(folder)
    # Its own folder is written over freely, and what mp13 recorded there is kept.
    assert engine.adapters.save("a", folder) == folder
    assert json.loads(meta_file.read_text())["note"] == "a's"
    # overwrite=True replaces the folder's adapter; a's record does not pass to b.
    assert engine.adapters.save("b", folder, overwrite=True) == folder
    meta = json.loads(meta_file.read_text())
    assert meta["name"] == "b" and "note" not in meta
    # a's weights are no longer there: its info says so, and saving it back needs overwrite.
    assert engine.adapters.get("a").path is None
    with pytest.raises(AdapterError, match="already holds another saved adapter"):
        engine.adapters.save("a", folder)
    # What mp13 recorded about an adapter goes with it to a new folder.
    meta_file.write_text(json.dumps({**meta, "note": "b's"}))
    copy = engine.adapters.save("b", tmp_path / "b-copy")
    assert json.loads((copy / METADATA_FILE).read_text())["note"] == "b's"
    assert engine.adapters.load(folder, name="b2").rank == engine.adapters.get("b").rank == 2


def test_unknown_adapter_fails_only_that_request(engine):
    bad, good = engine.generate_many([_req(PROMPTS[0], adapters=["nope"]), _req(PROMPTS[1])])
    assert bad.finish_reason is FinishReason.ERROR
    assert "nope" in bad.error and "load" in bad.error
    assert good.ok


def test_unload_while_requests_queued(engine):
    engine.adapters.load("a")
    futures = [engine.submit(_req(PROMPTS[i % 5], adapters=["a"], n=30)) for i in range(12)]
    engine.adapters.unload("a")
    responses = [f.result(timeout=120) for f in futures]
    for r in responses:  # ran before the unload, or failed clearly after it
        assert r.ok or ("'a'" in r.error and r.finish_reason is FinishReason.ERROR)
    assert any(r.finish_reason is FinishReason.ERROR for r in responses)
    assert engine.adapters.list() == []
    assert engine.generate(_req(PROMPTS[0])).ok  # still serving
    with pytest.raises(AdapterError):
        engine.adapters.unload("a")


def test_unloading_an_adapter_a_running_request_uses_ends_that_request_error(engine):
    engine.adapters.load("a")
    long = Request(prompt="Hello", adapters=["a"], max_new_tokens=2000, min_new_tokens=2000)
    beside = engine.submit(Request(prompt="Hello", max_new_tokens=40, min_new_tokens=40))
    stream = engine.stream(long)
    next(c for c in stream if c.text)  # it is running
    engine.adapters.unload("a")
    response = stream.result()
    assert response.finish_reason is FinishReason.ERROR
    assert response.error == (
        "adapter 'a' was unloaded, replaced or re-weighted while this request ran (its cached "
        "keys and values came from the old weights); send the request again"
    )
    assert 0 < response.metrics.completion_tokens < 2000 and response.text  # partial kept
    assert beside.result(timeout=120).finish_reason is FinishReason.LENGTH  # the others go on


def test_reweighting_a_combination_ends_a_request_running_on_it_error(engine):
    engine.adapters.load("a")
    engine.adapters.load("b")
    long = Request(prompt="Hello", adapters=["a", "b"], max_new_tokens=2000, min_new_tokens=2000)
    stream = engine.stream(long)
    next(c for c in stream if c.text)
    engine.adapters.combine(["a", "b"], [0.5, 2.0])
    response = stream.result()
    assert response.finish_reason is FinishReason.ERROR
    # Was: "unloaded or replaced", though both adapters were still loaded as they were.
    assert "'a, b' was unloaded, replaced or re-weighted while this request ran" in response.error
    assert engine.generate(_req(PROMPTS[0], adapters=["a", "b"])).ok  # new weights serve


def test_a_path_given_as_an_adapter_name_says_how_to_load_it(engine):
    # The advice was load(path, name='adapters/pirate'), which load refuses as a name.
    response = engine.generate(_req(PROMPTS[0], adapters=["adapters/pirate"]))
    assert response.finish_reason is FinishReason.ERROR
    assert response.error == (
        "Unknown adapter 'adapters/pirate': an adapter name is a name, not a path, so it may "
        "not contain '/', '\\', ':' or '.' (this one has '/'). Load the folder with "
        "engine.adapters.load('adapters/pirate') and use the name it gets (the folder's name, "
        "'pirate'); loaded adapters: none."
    )
    with pytest.raises(AdapterError, match=r"^Unknown adapter 'x'; .*load\(path, name='x'\)"):
        engine.adapters.set_default("x")  # a plain name keeps the name= advice
    with pytest.raises(AdapterError) as err:  # no folder name to suggest: no load advice
        engine.adapters.unload("a.b")
    assert str(err.value) == (
        "Unknown adapter 'a.b': an adapter name is a name, not a path, so it may not contain "
        "'/', '\\', ':' or '.' (this one has '.'); loaded adapters: none."
    )


def test_a_model_given_as_an_adapter_says_to_load_it_as_the_base(engine, adapter_dirs, tmp_path):
    """The model's GGUF file or folder, or a file inside an adapter folder, given to
    adapters.load: the error says what the path holds and what to do with it."""
    gguf_file = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf_file.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(AdapterError) as info:
        engine.adapters.load(gguf_file)
    assert "is a GGUF model file, not a LoRA adapter: load it as the base model with " in str(
        info.value
    )
    pytest.importorskip("gguf")
    from tests.engine._tiny_gguf import write_lora_gguf

    with pytest.raises(AdapterError) as info:
        engine.adapters.load(write_lora_gguf(tmp_path / "pirate-lora.gguf"))
    assert "is a LoRA adapter in llama.cpp's GGUF format, which mp13 cannot read" in str(info.value)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    with pytest.raises(AdapterError) as info:
        engine.adapters.load(model_dir)
    assert "holds a model (config.json), not a LoRA adapter" in str(info.value)
    inside = adapter_dirs / "a" / "adapter_config.json"
    with pytest.raises(AdapterError) as info:
        engine.adapters.load(inside)
    assert str(info.value).endswith(f"give the folder that holds it: {str(inside.parent)!r}.")
    with pytest.raises(AdapterError) as info:  # a plain missing folder: no guess added
        engine.adapters.load(tmp_path / "missing")
    assert str(info.value).endswith("set EngineConfig.adapters_dir for short names.")
    assert engine.adapters.list() == []  # nothing half-loaded


def test_load_errors_are_clear(engine, adapter_dirs, tmp_path):
    with pytest.raises(AdapterError, match="No PEFT adapter directory") as info:
        engine.adapters.load(tmp_path / "missing")
    # An absolute path is not looked up under adapters_dir (the message used to say it was).
    assert str(info.value).startswith(
        f"No PEFT adapter directory at {str(tmp_path / 'missing')!r} ("
    )
    # A short name is looked up under adapters_dir too, and the message says where it looked.
    with pytest.raises(AdapterError) as info:
        engine.adapters.load("missing")
    assert str(info.value).startswith(
        f"No PEFT adapter directory at 'missing' or under adapters_dir {str(adapter_dirs)!r} "
    )
    engine.adapters.load("a")
    with pytest.raises(AdapterError, match="already loaded"):
        engine.adapters.load("a")
    engine.adapters.load("b", name="a", replace=True)
    assert engine.adapters.get("a").rank == 2
    with pytest.raises(AdapterError, match="Invalid adapter name"):
        engine.adapters.load("b", name="__base__")
    # A folder whose name cannot name an adapter: the caller never chose that name, so the
    # error says to pass one (it used to say only "Pick another name").
    folder = tmp_path / "pirate-v1.0"
    shutil.copytree(adapter_dirs / "b", folder)
    with pytest.raises(AdapterError, match=r"folder's name 'pirate-v1\.0' cannot name") as info:
        engine.adapters.load(folder)
    assert f"engine.adapters.load({str(folder)!r}, name='pirate-v1-0')" in str(info.value)
    assert engine.adapters.load(folder, name="pirate-v1-0").rank == 2


def _damaged(tmp_path: pathlib.Path, adapter_dirs: pathlib.Path, case: str) -> pathlib.Path:
    folder = tmp_path / case
    shutil.copytree(adapter_dirs / "a", folder)
    if case == "garbage-safetensors":
        (folder / "adapter_model.safetensors").write_bytes(b"garbage" * 10)
    elif case == "garbage-bin":
        (folder / "adapter_model.safetensors").unlink()
        (folder / "adapter_model.bin").write_bytes(b"garbage" * 10)
    else:
        config = json.loads((folder / "adapter_config.json").read_text())
        (folder / "adapter_config.json").write_text(json.dumps({**config, "peft_type": "WHAT"}))
    return folder


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("garbage-safetensors", r"Cannot read the adapter weights in .*header.*damaged"),
        ("garbage-bin", r"Cannot read the adapter weights in .*adapter_model\.bin.*damaged"),
        ("unknown-peft-type", r"names a peft_type PEFT does not know \('WHAT'\)"),
    ],
)
def test_a_damaged_adapter_folder_is_an_adapter_error(engine, adapter_dirs, tmp_path, case, match):
    """These used to escape as SafetensorError, UnpicklingError and KeyError."""
    engine.adapters.load("b")
    with pytest.raises(AdapterError, match=match) as info:
        engine.adapters.load(_damaged(tmp_path, adapter_dirs, case), name="x")
    assert "\n" not in str(info.value)  # torch's pages of unpickling advice are not shown
    assert [i.name for i in engine.adapters.list()] == ["b"]
    assert engine.generate(_req(PROMPTS[0], adapters=["b"])).ok


def test_replacing_keeps_the_defaults_and_a_refused_replacement_loses_nothing(
    engine, adapter_dirs, tmp_path
):
    """replace=True used to unload first: a replacement PEFT refused left no adapter of that
    name, and even a good one dropped it from the defaults (requests with adapters=None then
    ran on the base model) and forgot its combine weights."""
    engine.adapters.load("a")
    engine.adapters.load("b")
    engine.adapters.set_default("a")
    engine.adapters.combine(["a", "b"], [0.5, 2.0])
    plain, combined = _req(PROMPTS[3], n=10), _req(PROMPTS[3], adapters=["a", "b"], n=10)
    before = [engine.generate(r).raw_text for r in (plain, combined)]
    broken = tmp_path / "r0"
    shutil.copytree(adapter_dirs / "b", broken)
    config = json.loads((broken / "adapter_config.json").read_text())
    (broken / "adapter_config.json").write_text(json.dumps({**config, "r": 0}))
    with pytest.raises(AdapterError, match=r"PEFT could not load adapter .*r0"):
        engine.adapters.load(broken, name="a", replace=True)
    assert engine.adapters.get("a").rank == 4 and engine.adapters.defaults == ("a",)
    assert [engine.generate(r).raw_text for r in (plain, combined)] == before
    assert not [n for n in engine.model.peft_config if n.startswith("__replacing__")]
    engine.adapters.load("b", name="a", replace=True)
    assert engine.adapters.get("a").rank == 2 and engine.adapters.defaults == ("a",)
    assert engine.generate(plain).raw_text == engine.generate(_req(PROMPTS[3], ["b"], 10)).raw_text
    kept = engine.generate(combined).raw_text
    engine.adapters.combine(["a", "b"], [0.5, 2.0])  # what the replace kept: nothing changes
    assert engine.generate(combined).raw_text == kept


def test_a_dora_adapter_is_refused_at_load(engine, tiny_model_path, tmp_path):
    """It used to load, then fail every request on it ("generation failed: ValueError: Cannot
    pass `adapter_names` when DoRA is enabled")."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    config = LoraConfig(r=4, target_modules=["q_proj"], use_dora=True, init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(tmp_path / "dora")
    engine.adapters.load("a")
    with pytest.raises(AdapterError, match=r"is a DoRA adapter .*retrain it as plain LoRA"):
        engine.adapters.load(tmp_path / "dora")
    assert [i.name for i in engine.adapters.list()] == ["a"]
    assert engine.generate(_req(PROMPTS[0], adapters=["a"])).ok


def test_incompatible_adapter_is_refused_with_reason(engine, tmp_path):
    """An adapter made for another architecture (other hidden size) fails before any change."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    other = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=300,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    )
    get_peft_model(other, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(
        tmp_path / "x"
    )
    with pytest.raises(AdapterError, match=r"does not fit .*q_proj.*input size 32"):
        engine.adapters.load(tmp_path / "x")
    assert engine.adapters.list() == []
    assert engine.generate(_req(PROMPTS[0])).ok


def test_adapter_on_module_the_base_lacks(engine, tmp_path, tiny_model_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(tmp_path / "y")
    weights = tmp_path / "y" / "adapter_model.safetensors"
    from safetensors.torch import load_file, save_file

    renamed = {
        k.replace("self_attn.q_proj", "self_attn.qkv_fused"): v
        for k, v in load_file(weights).items()
    }
    save_file(renamed, weights)
    with pytest.raises(AdapterError, match=r"qkv_fused.*does not have"):
        engine.adapters.load(tmp_path / "y")


def test_adapter_recorded_for_another_model_family_is_refused(engine, tmp_path):
    engine.adapters.load("a")
    saved = engine.adapters.save("a", tmp_path / "mine")
    meta_file = saved / METADATA_FILE
    meta = json.loads(meta_file.read_text())
    meta.update(model_type="llama", base_model="meta-llama/Llama-3.2-1B")
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(AdapterError, match=r"trained on a 'llama' model.*Llama-3\.2-1B"):
        engine.adapters.load(saved, name="again")


TRAIN_ROWS = [
    {"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": "Yes."}]}
    for p in PROMPTS[:4]
]


@pytest.mark.parametrize("other", ["none", "before", "after"])
def test_unload_trained_adapter_keeps_serving_and_loading(engine, tmp_path, other):
    """Regression: unloading a trained adapter left PEFT pointing at the deleted name.

    The next ``adapters.load`` failed with ``KeyError: 'ad1'`` and so did every generation.
    """
    from mp13_engine import TrainingConfig

    if other == "before":
        engine.adapters.load("a")
    config = TrainingConfig(
        adapter="ad1", dataset=TRAIN_ROWS, max_steps=2, batch_size=4, output_dir=str(tmp_path)
    )
    engine.train(config).result(timeout=300)
    saved_config = json.loads((tmp_path / "adapter_config.json").read_text())
    # Trained after a loaded adapter ("before"), its info said base_model=None.
    assert engine.adapters.get("ad1").base_model == saved_config["base_model_name_or_path"]
    if other == "after":
        engine.adapters.load("a")
    engine.adapters.save("ad1", tmp_path / "saved")
    engine.adapters.unload("ad1")
    assert engine.generate(_req(PROMPTS[0])).ok
    engine.adapters.load(tmp_path / "saved", "ad2")
    engine.adapters.load("b")
    expected = ["ad2", "b"] if other == "none" else ["a", "ad2", "b"]
    assert [i.name for i in engine.adapters.list()] == expected
    for adapters in (["ad2"], ["ad2", "b"], [], ["b"]):
        assert engine.generate(_req(PROMPTS[1], adapters=adapters)).ok
    for name in expected:
        engine.adapters.unload(name)
        assert engine.generate(_req(PROMPTS[1])).ok
    assert engine.adapters.list() == []


def test_unload_repoints_peft_when_no_layer_adapter_stays_active(engine):
    """PEFT keeps a deleted ``active_adapter`` when no layer-level adapter remains active."""
    engine.adapters.load("a")
    engine.adapters.load("b")
    engine._run_on_worker(lambda: engine.model.base_model.set_adapter([]))
    engine.adapters.unload("a")
    assert engine.model.active_adapter == "b"
    engine.adapters.load("a", name="again")
    assert engine.generate(_req(PROMPTS[0], adapters=["again"])).ok
    assert engine.generate(_req(PROMPTS[0])).ok


@pytest.mark.parametrize("wrapped", [False, True], ids=["first-adapter", "next-adapter"])
def test_a_load_that_fails_inside_peft_leaves_the_model_as_it_was(engine, monkeypatch, wrapped):
    """PEFT injects LoRA layers before it loads weights; a failure there must not stay."""
    import peft.peft_model
    from peft.tuners.tuners_utils import BaseTunerLayer

    if wrapped:
        engine.adapters.load("a")
    request = _req(PROMPTS[1], adapters=[], n=10)
    before = engine.generate(request).raw_text

    def broken(*args, **kwargs):
        raise RuntimeError("simulated failure while loading the weights")

    monkeypatch.setattr(peft.peft_model, "set_peft_model_state_dict", broken)
    with pytest.raises(AdapterError, match="simulated failure"):
        engine.adapters.load("b")
    monkeypatch.undo()

    assert [i.name for i in engine.adapters.list()] == (["a"] if wrapped else [])
    if not wrapped:
        assert not any(isinstance(m, BaseTunerLayer) for m in engine.model.modules())
    else:
        assert "b" not in engine.model.peft_config
    assert engine.generate(request).raw_text == before
    engine.adapters.load("b")  # the same adapter loads fine afterwards
    assert engine.generate(_req(PROMPTS[1], adapters=["b"], n=10)).ok


def test_reweighting_a_combination_is_served_with_the_new_weights(
    engine, tiny_model_path, adapter_dirs
):
    """The combination is rebuilt under the same name; nothing may serve the old one."""
    engine.adapters.load("a")
    engine.adapters.load("b")
    request = _req(PROMPTS[2], adapters=["a", "b"], n=10)
    engine.adapters.combine(["a", "b"], [1.0, 1.0])
    first = engine.generate(request).raw_text
    engine.adapters.combine(["a", "b"], [2.0, -1.0])
    reweighted = engine.generate(request).raw_text
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dirs)) as fresh:
        fresh.adapters.load("a")
        fresh.adapters.load("b")
        fresh.adapters.combine(["a", "b"], [2.0, -1.0])
        assert reweighted == fresh.generate(request).raw_text
    assert reweighted != first


def test_combine_refuses_a_name_given_twice_and_keeps_the_weights(engine):
    """combine(["a", "a"], ...) used to store weights for a set no request can name: a no-op."""
    engine.adapters.load("a")
    engine.adapters.load("b")
    request = _req(PROMPTS[2], adapters=["a", "b"], n=10)
    engine.adapters.combine(["a", "b"], [2.0, -1.0])
    reweighted = engine.generate(request).raw_text
    with pytest.raises(AdapterError, match=r"takes each adapter once, but .* repeats \['a'\]"):
        engine.adapters.combine(["a", "b", "a"], [1.0, 1.0, 1.0])
    assert engine.generate(request).raw_text == reweighted  # the refused call changed nothing


def test_adapter_directories_of_other_shapes(engine, adapter_dirs, tmp_path):
    """A legacy ``adapter_model.bin`` adapter serves like its safetensors twin; a directory
    with no weights, a broken or non-LoRA config is refused with what to do, and a damaged
    mp13 metadata file is ignored (it only records where the adapter came from)."""
    import shutil

    from peft import IA3Config
    from safetensors.torch import load_file

    legacy = tmp_path / "legacy"
    shutil.copytree(adapter_dirs / "a", legacy)
    weights = legacy / "adapter_model.safetensors"
    torch.save(load_file(weights), legacy / "adapter_model.bin")
    weights.unlink()
    (legacy / METADATA_FILE).write_text("{not json")
    engine.adapters.load("a")
    assert engine.adapters.load(legacy, name="legacy").rank == 4
    same = [engine.generate(_req(PROMPTS[0], [name])).raw_text for name in ("a", "legacy")]
    assert same[0] == same[1]

    empty = tmp_path / "empty"
    shutil.copytree(legacy, empty)
    (empty / "adapter_model.bin").unlink()
    broken = tmp_path / "broken"
    shutil.copytree(adapter_dirs / "a", broken)
    (broken / "adapter_config.json").write_text("{oops")
    ia3 = tmp_path / "ia3"
    IA3Config(target_modules=["q_proj"], feedforward_modules=[]).save_pretrained(ia3)
    cases = [
        (empty, "has no adapter_model.safetensors or"),
        (broken, "Cannot read the adapter config in .*It must be a PEFT adapter directory"),
        (ia3, "is a IA3 adapter; mp13 serves LoRA adapters only"),
    ]
    for directory, needle in cases:
        with pytest.raises(AdapterError, match=needle):
            engine.adapters.load(directory, name="bad")
        assert "bad" not in engine.adapters
    assert sorted(info.name for info in engine.adapters.list()) == ["a", "legacy"]


def _lora_on(base_path: pathlib.Path, dest: pathlib.Path, targets) -> pathlib.Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_path)
    with torch.random.fork_rng():
        torch.manual_seed(5)
        config = LoraConfig(r=2, target_modules=targets, init_lora_weights=False)
        get_peft_model(base, config).save_pretrained(dest)
    return dest


def test_embedding_lora_with_a_regex_target_serves_and_a_misfit_names_the_vocab(
    engine, tiny_model_path, tiny_model_factory, tmp_path
):
    """An adapter whose target_modules is one regex (PEFT keeps it a str) lists that regex;
    LoRA on the token embedding changes the output; one made for another vocabulary is
    refused with both sizes."""
    regex = r".*\.(embed_tokens|q_proj)"
    info = engine.adapters.load(_lora_on(tiny_model_path, tmp_path / "emb", regex), name="emb")
    assert info.targets == (regex,) and info.rank == 2
    base = engine.generate(_req(PROMPTS[0], []))
    tuned = engine.generate(_req(PROMPTS[0], ["emb"]))
    assert tuned.ok and tuned.raw_text != base.raw_text
    engine.adapters.load("a")
    both = engine.generate(_req(PROMPTS[0], ["emb", "a"]))  # PEFT cannot mix the two kinds
    assert both.finish_reason is FinishReason.ERROR
    assert both.error.startswith("Cannot combine adapters ['a', 'emb']: ")
    assert both.error.endswith(
        "Use them in separate requests, or load adapters that target the same kind of modules."
    )
    assert engine.generate(_req(PROMPTS[0], ["emb"])).raw_text == tuned.raw_text
    other = _lora_on(tiny_model_factory("llama3"), tmp_path / "other", ["embed_tokens"])
    with pytest.raises(AdapterError, match=r"embedding LoRA for \d+ tokens, model has \d+"):
        engine.adapters.load(other, name="other")
    assert "other" not in engine.adapters


class _Killed(Exception):
    """Stands for the process dying at that point of a save."""


def _adapter_state(folder: pathlib.Path) -> dict[str, bytes]:
    return {n: (folder / n).read_bytes() for n in sorted(ADAPTER_FILES) if (folder / n).is_file()}


def test_a_save_cut_short_leaves_one_whole_adapter_and_keeps_the_folders_other_files(
    engine, tmp_path, monkeypatch
):
    """Saving over an adapter moved its files in one at a time: a process killed between two
    moves left the new config beside the old weights. The new adapter is now written beside
    the folder and swapped in; the folder's other entries (a job's checkpoints) stay."""
    engine.adapters.load("a")
    engine.adapters.load("b")
    folder = engine.adapters.save("a", tmp_path / "x")
    (folder / "checkpoints" / "step-2").mkdir(parents=True)
    (folder / "checkpoints" / "step-2" / "trainer_state.pt").write_bytes(b"state")
    (folder / "notes.txt").write_text("mine")
    (folder / "adapter_model.bin").write_bytes(b"stale")  # an older save's other format
    old = _adapter_state(folder)
    engine.adapters.save("b", tmp_path / "b-alone")
    new = _adapter_state(tmp_path / "b-alone")
    new_meta = json.loads(new.pop(METADATA_FILE))

    def whole_b() -> bool:
        state = _adapter_state(folder)
        meta = json.loads(state.pop(METADATA_FILE))
        return state == new and meta["name"] == new_meta["name"] == "b"

    real_rename = pathlib.Path.rename
    for kill_at in (1, 2, 3):  # aside the old folder, the new one in, an entry moved back
        calls = []

        def rename(self, target, kill_at=kill_at, calls=calls):
            calls.append(self)
            if len(calls) == kill_at:
                raise _Killed
            return real_rename(self, target)

        monkeypatch.setattr(pathlib.Path, "rename", rename)
        with pytest.raises(_Killed):
            engine.adapters.save("b", folder, overwrite=True)
        monkeypatch.setattr(pathlib.Path, "rename", real_rename)
        # The old adapter whole (or no folder, until the next save puts it back), or the new.
        assert not folder.exists() or _adapter_state(folder) == old or whole_b()
        assert engine.adapters.save("b", folder, overwrite=True) == folder
        assert whole_b() and not (folder / "adapter_model.bin").exists()
        assert (folder / "notes.txt").read_text() == "mine"
        assert (folder / "checkpoints" / "step-2" / "trainer_state.pt").read_bytes() == b"state"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["b-alone", "x"]  # nothing beside
        engine.adapters.save("a", folder, overwrite=True)
        assert engine.adapters.load(folder, name=f"a{kill_at}").rank == 4

    # A folder that cannot be renamed (Windows, a file in it open): its files are replaced.
    def locked(self, target):
        if self == folder:
            raise PermissionError("in use")
        return real_rename(self, target)

    monkeypatch.setattr(pathlib.Path, "rename", locked)
    assert engine.adapters.save("b", folder, overwrite=True) == folder
    assert whole_b() and (folder / "notes.txt").read_text() == "mine"


def test_two_saves_into_one_folder_at_once_each_swap_in_whole(engine, tmp_path, monkeypatch):
    """Two processes saving one folder shared its staging folder's name: the second cleared
    the first's half-swapped adapter, and the first failed or swapped in a mix. Each save now
    stages under its own name; one that loses the folder to another between its two renames
    swaps again, so the last to swap in is the folder, whole, and the other entries stay."""
    from mp13_engine._adapter_save import write_adapter_dir

    engine.adapters.load("a")
    engine.adapters.load("b")
    folder = engine.adapters.save("a", tmp_path / "x")
    (folder / "notes.txt").write_text("mine")
    expected = {n: _adapter_state(engine.adapters.save(n, tmp_path / f"{n}-alone")) for n in "ab"}
    real_rename = pathlib.Path.rename
    staged: list[str] = []

    def rename(self, target):
        if self == folder and not staged:  # save 1 moves the folder aside: save 2 runs whole
            staged.extend(p.name for p in tmp_path.iterdir() if ".mp13-save" in p.name)
            write_adapter_dir(engine.model, "a", folder)
        return real_rename(self, target)

    monkeypatch.setattr(pathlib.Path, "rename", rename)
    assert engine.adapters.save("b", folder, overwrite=True) == folder
    monkeypatch.undo()
    assert len(staged) == 1  # save 1's staging folder, which save 2 never touched
    state = _adapter_state(folder)
    assert json.loads(state.pop(METADATA_FILE))["name"] == "b"  # save 1 swapped in last
    assert state == {k: v for k, v in expected["b"].items() if k != METADATA_FILE}
    assert (folder / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-alone", "b-alone", "x"]


@pytest.mark.parametrize("leftover", [".x.mp13-old", ".x.mp13-old.123-abc"])
def test_loading_a_folder_whose_save_was_cut_short_puts_it_back(
    engine, tmp_path, monkeypatch, leftover
):
    """A save killed between its two renames leaves no folder and the old one beside it (the
    bare name is what older versions left). Loading the folder used to say there was no
    adapter there; it now puts the old folder back, or says where the adapter is."""
    engine.adapters.load("a")
    folder = engine.adapters.save("a", tmp_path / "x")
    (folder / "notes.txt").write_text("mine")
    folder.rename(tmp_path / leftover)

    def refused(self, target):
        raise PermissionError("read-only")

    monkeypatch.setattr(pathlib.Path, "rename", refused)
    with pytest.raises(AdapterError) as info:
        engine.adapters.load(folder, name="back")
    monkeypatch.undo()
    text = str(info.value)
    assert "cut short" in text and leftover in text and "Rename that folder to 'x'" in text

    assert engine.adapters.load(folder, name="back").rank == 4
    assert (folder / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]


def test_a_save_deletes_the_staging_folders_of_killed_saves_only(engine, tmp_path):
    """Staging names are unique per save, so the next save no longer clears a killed one's
    by name: it deletes those of a process no longer running that are an hour old, and
    leaves a running save's (this process, or one that started within the hour)."""
    import os
    import subprocess
    import sys
    import time

    engine.adapters.load("a")
    folder = engine.adapters.save("a", tmp_path / "x")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = int(gone.stdout)
    hour_ago = time.time() - 3700
    killed = tmp_path / f".x.mp13-save.{dead}-aaaa"
    running = tmp_path / f".x.mp13-save.{os.getpid()}-bbbb"
    recent = tmp_path / f".x.mp13-save.{dead}-cccc"
    for staging in (killed, running, recent):
        (staging / "a").mkdir(parents=True)
    for staging in (killed, running):
        os.utime(staging, (hour_ago, hour_ago))
    engine.adapters.save("a", folder)
    assert not killed.exists() and running.is_dir() and recent.is_dir()
