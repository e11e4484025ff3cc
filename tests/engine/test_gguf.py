# SPDX-License-Identifier: Apache-2.0
"""GGUF files: loaded like their checkpoint, converted once into the cache, clear errors."""

from __future__ import annotations

import os
import pathlib
import sys
import threading
import time

import pytest

from mp13_engine import (
    Engine,
    GGUFError,
    MissingDependencyError,
    ModelLoadError,
    ModelNotFoundError,
    NotCausalLMError,
    Request,
)
from tests.engine._tiny_gguf import (
    with_tensor_type,
    write_foreign_gguf,
    write_llama_gguf,
    write_lora_gguf,
)

pytest.importorskip("gguf")

PROMPTS = ["Hello there, how are you", "the weather is nice", "tell me about tools"]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from mp13_engine.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("llama3"), family="llama3", seed=3)


@pytest.fixture(scope="module")
def gguf_master(llama_dir, tmp_path_factory):
    return write_llama_gguf(llama_dir, tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")


@pytest.fixture
def gguf_file(gguf_master, tmp_path):
    """A fresh copy per test: a new path is a new file to the cache."""
    import shutil

    dest = tmp_path / "files" / gguf_master.name
    dest.parent.mkdir()
    return pathlib.Path(shutil.copy2(gguf_master, dest))


@pytest.fixture(autouse=True)
def gguf_cache(tmp_path, monkeypatch):
    cache = tmp_path / "mp13-cache"
    monkeypatch.setenv("MP13_CACHE", str(cache))
    return cache / "gguf"


def _replies(path) -> list[str]:
    with Engine.load(path, device="cpu") as engine:
        requests = [
            Request(messages=[{"role": "user", "content": p}], max_new_tokens=8) for p in PROMPTS
        ]
        return [r.raw_text for r in engine.generate_many(requests)]


def test_a_gguf_file_answers_like_the_checkpoint_it_was_made_from(tmp_path):
    # Mistral: one end token, so the checkpoint and its GGUF stop on the same tokens.
    from mp13_engine.testing import build_tiny_model

    checkpoint = build_tiny_model(tmp_path / "mistral", family="mistral", seed=5)
    gguf = write_llama_gguf(checkpoint, tmp_path / "mistral.gguf", name="mp13 tiny mistral")
    replies = _replies(gguf)
    assert replies == _replies(checkpoint)
    assert len(set(replies)) == len(PROMPTS)


def test_end_of_turn_tokens_of_the_file_become_end_tokens(llama_dir, tmp_path):
    import transformers

    ends = {"eot": "<|eot_id|>", "eom": "<|eom_id|>"}
    path = write_llama_gguf(llama_dir, tmp_path / "ends.gguf", end_tokens=ends)
    with Engine.load(path, device="cpu") as engine:
        tok = engine.tokenizer
        expected = {tok.convert_tokens_to_ids(t) for t in ends.values()}
        assert tok.eos_token == "<|eot_id|>"
        config = transformers.GenerationConfig.from_pretrained(engine.model.name_or_path)
        assert set(config.eos_token_id) == expected


def test_the_chat_template_and_tokenizer_come_from_the_file(llama_dir, gguf_file):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    with Engine.load(llama_dir, device="cpu") as original, Engine.load(gguf_file) as converted:
        assert converted.format_prompt(messages) == original.format_prompt(messages)
        assert converted.format_prompt(messages).startswith("<|begin_of_text|>")
        assert converted.count_tokens("hello world") == original.count_tokens("hello world")


def test_a_folder_holding_one_gguf_loads_it(gguf_file, gguf_cache):
    with Engine.load(str(gguf_file.parent), device="cpu") as engine:
        assert engine.generate(Request(prompt="hello", max_new_tokens=2)).ok
    assert len(_entries(gguf_cache)) == 1


def _entries(cache) -> list:
    return [p for p in cache.iterdir() if not p.name.startswith(".")]


def test_the_second_load_uses_the_cache_and_reports_no_conversion(gguf_file, gguf_cache):
    first: list = []
    Engine.load(gguf_file, device="cpu", progress=first.append).close()
    stages = [p.stage for p in first]
    assert stages == ["convert"] * stages.count("convert") + ["load"] * stages.count("load")
    first = [p for p in first if p.stage == "convert"]
    assert len(first) >= 2
    assert first[0].message.startswith("converting tiny-llama.gguf")
    assert first[-1].done == first[-1].total == 3
    (entry,) = _entries(gguf_cache)
    assert (entry / "config.json").is_file() and (entry / "model.safetensors").is_file()

    again: list = []
    started = time.perf_counter()
    Engine.load(gguf_file, device="cpu", progress=again.append).close()
    assert {p.stage for p in again} == {"load"}  # nothing converted; the weights read
    assert time.perf_counter() - started < 30
    assert _entries(gguf_cache) == [entry]


def test_a_changed_file_is_converted_again_and_its_old_entry_removed(gguf_file, gguf_cache):
    Engine.load(gguf_file, device="cpu").close()
    (old,) = _entries(gguf_cache)
    stranger = gguf_cache / "not-an-entry"  # no entry file: not ours to judge, left alone
    stranger.mkdir()
    stat = gguf_file.stat()
    os.utime(gguf_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    events: list = []
    Engine.load(gguf_file, device="cpu", progress=events.append).close()
    assert [e for e in events if e.stage == "convert"]  # converted again
    (new,) = [e for e in _entries(gguf_cache) if e != stranger]
    assert new != old and stranger.is_dir()


def test_each_dtype_has_its_own_entry(gguf_file, gguf_cache):
    import torch

    with Engine.load(gguf_file, device="cpu", dtype="bfloat16") as engine:
        assert next(engine.model.parameters()).dtype == torch.bfloat16
    Engine.load(gguf_file, device="cpu").close()
    assert sorted(p.name.split("-")[-2] for p in _entries(gguf_cache)) == [
        "bfloat16",
        "float32",
    ]


def test_two_threads_loading_one_new_file_convert_it_once(gguf_file, gguf_cache):
    from mp13_engine._gguf import cached_checkpoint

    reports: list = []
    results: list = []
    barrier = threading.Barrier(2)

    def load() -> None:
        barrier.wait()
        results.append(cached_checkpoint(gguf_file, "float32", progress=reports.append))

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 2 and results[0] == results[1]
    assert [r.done for r in reports if r.stage == "convert"].count(0) == 1
    assert _entries(gguf_cache) == [results[0]]
    assert not [p for p in gguf_cache.iterdir() if p.name.startswith(".tmp")]


def test_a_folder_with_several_ggufs_names_them(gguf_file):
    second = gguf_file.with_name("other.gguf")
    second.write_bytes(gguf_file.read_bytes())
    with pytest.raises(GGUFError) as info:
        Engine.load(gguf_file.parent, device="cpu")
    message = str(info.value)
    assert "2 GGUF files" in message and "other.gguf" in message and "tiny-llama.gguf" in message
    assert "give the file itself" in message


def test_a_file_named_gguf_that_is_not_one_is_refused(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"<html>404 Not Found</html>")
    with pytest.raises(GGUFError, match="is not one"):
        Engine.load(bad, device="cpu")


def test_a_truncated_gguf_says_to_fetch_it_again(gguf_file):
    gguf_file.write_bytes(gguf_file.read_bytes()[:100])
    with pytest.raises(GGUFError, match="may be truncated or corrupt, so fetch it again"):
        Engine.load(gguf_file, device="cpu")


def test_an_architecture_transformers_cannot_read_is_named(tmp_path):
    path = write_foreign_gguf(tmp_path / "strange.gguf", arch="mp13-strange-arch")
    with pytest.raises(GGUFError) as info:
        Engine.load(path, device="cpu")
    message = str(info.value)
    assert "a model of architecture 'mp13-strange-arch'" in message
    assert "llama" in message  # what is supported
    assert "original Hugging Face checkpoint" in message


def test_a_quantization_type_gguf_cannot_dequantize_is_named_before_converting(
    gguf_file, gguf_cache
):
    import gguf

    odd = gguf_file.with_name("q8_1.gguf")
    with_tensor_type(gguf_file, odd, "blk.0.attn_q.weight", gguf.GGMLQuantizationType.Q8_1)
    with pytest.raises(GGUFError) as info:
        Engine.load(odd, device="cpu")
    message = str(info.value)
    assert "stores weights as Q8_1" in message  # what is wrong, not "is the file complete?"
    assert "Q4_K_M" in message and "Hugging Face checkpoint" in message  # what to do
    assert not list(gguf_cache.glob("*/mp13_gguf.json"))  # refused, nothing converted
    with Engine.load(gguf_file, device="cpu") as engine:  # the same model in a readable type
        assert engine.generate(Request(prompt="hi", max_new_tokens=2)).ok


def _never_build_a_model(monkeypatch):
    """Should a check regress, fail the test, not the machine (a 7B float32 allocation)."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("the GGUF file was not refused before building a model from it")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)


def test_a_gguf_lora_adapter_is_refused_as_a_model(tmp_path, gguf_cache, monkeypatch):
    """transformers read it as a Llama of the default size (7B) and the process was killed
    for memory; now Engine.load says what the file is, and adapters.load too."""
    _never_build_a_model(monkeypatch)
    lora = write_lora_gguf(tmp_path / "pirate-lora.gguf")
    with pytest.raises(GGUFError) as info:
        Engine.load(lora, device="cpu")
    assert "is a LoRA adapter in llama.cpp's GGUF format, not a model" in str(info.value)
    assert "engine.adapters.load(folder)" in str(info.value)
    assert not list(gguf_cache.glob("*/mp13_gguf.json"))


def test_a_gguf_without_a_model_shape_is_refused_before_building_it(tmp_path, monkeypatch):
    import gguf

    _never_build_a_model(monkeypatch)
    lora = write_lora_gguf(tmp_path / "vocab.gguf")
    # The same file without its adapter marking: transformers would build a default-size Llama.
    reader = gguf.GGUFReader(str(lora))
    assert "llama.embedding_length" not in reader.fields
    from mp13_engine import _gguf

    monkeypatch.setattr(_gguf, "is_adapter_file", lambda file: False)
    with pytest.raises(GGUFError, match=r"declares no model shape \(llama.embedding_length"):
        Engine.load(lora, device="cpu")


def test_a_non_causal_gguf_is_refused_before_converting(tmp_path, monkeypatch):
    from mp13_engine import _gguf

    path = write_foreign_gguf(tmp_path / "t5.gguf")

    class T5Config:
        model_type = "t5"
        architectures = ("T5ForConditionalGeneration",)
        is_encoder_decoder = True

    import transformers

    monkeypatch.setattr(
        transformers.AutoConfig, "from_pretrained", classmethod(lambda *a, **k: T5Config())
    )
    monkeypatch.setattr(_gguf, "architecture", lambda file: "t5")
    with pytest.raises(NotCausalLMError, match="not a causal"):
        Engine.load(path, device="cpu")


def test_a_missing_gguf_package_says_which_extra_to_install(gguf_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf now fails
    with pytest.raises(MissingDependencyError) as info:
        Engine.load(gguf_file, device="cpu")
    assert 'pip install "mp13[gguf]"' in str(info.value)
    assert isinstance(info.value, ModelLoadError) and isinstance(info.value, ImportError)


def test_a_plain_checkpoint_folder_with_a_stray_gguf_loads_the_checkpoint(
    llama_dir, tmp_path, gguf_cache
):
    import shutil

    folder = shutil.copytree(llama_dir, tmp_path / "both")
    (folder / "stray.gguf").write_bytes(b"GGUF")
    with Engine.load(folder, device="cpu") as engine:
        assert engine.generate(Request(prompt="hi", max_new_tokens=2)).ok
    assert not gguf_cache.exists()


def test_an_unwritable_cache_says_how_to_move_it(gguf_file, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("MP13_CACHE", str(blocker))
    with pytest.raises(ModelLoadError, match="MP13_CACHE"):
        Engine.load(gguf_file, device="cpu")


def test_a_missing_gguf_file_is_not_taken_for_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        Engine.load("missing-model.Q4_K_M.gguf", device="cpu")


def test_an_adapter_trained_on_a_gguf_names_the_file_and_loads_without_the_cache(
    gguf_file, gguf_cache, llama_dir, tmp_path
):
    """An adapter trained on a GGUF-loaded model recorded mp13's converted cache folder as its
    base model (adapter_config.json, mp13's metadata, AdapterInfo): a path that means nothing
    elsewhere and goes with the cache. It records the GGUF file now, and loads with the cache
    cleared, on the checkpoint the file was made from."""
    import json
    import shutil
    import warnings

    from mp13_engine import TrainingConfig
    from mp13_engine._adapter_files import METADATA_FILE

    rows = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}
    ]
    out = tmp_path / "adapter"
    with Engine.load(gguf_file, device="cpu") as engine:
        assert str(gguf_cache) in engine.model.name_or_path  # transformers loaded the cache's copy
        cfg = TrainingConfig(adapter="g", dataset=rows, max_steps=1, output_dir=str(out))
        assert engine.train(cfg).result(timeout=120).steps == 1
        recorded = engine.adapters.get("g").base_model
    source = str(gguf_file.resolve())
    assert recorded == source
    assert (
        json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == source
    )
    assert json.loads((out / METADATA_FILE).read_text())["base_model"] == source
    shutil.rmtree(gguf_cache)
    with Engine.load(llama_dir, device="cpu") as engine:
        assert engine.adapters.load(out).base_model == source
        reply = engine.generate(Request(prompt="hi", adapters=["adapter"], max_new_tokens=2))
        assert reply.finish_reason is not None and not reply.error
        # Saved again: PEFT's save looks for the base's config.json where the config points,
        # and warned "Could not find a config file" at a GGUF file's path (a hub id: asked
        # the hub). It looks in the engine's model folder; the file still names the GGUF.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            again = engine.adapters.save("adapter", tmp_path / "again")
        assert not [w for w in caught if "config file" in str(w.message)]
        assert (
            json.loads((again / "adapter_config.json").read_text())["base_model_name_or_path"]
            == source
        )


def test_an_adapter_names_a_hub_model_by_its_id_not_the_hub_cache_folder(tmp_path):
    """A hub model loads from the hub cache's snapshot folder; adapters name the hub id."""
    from types import SimpleNamespace

    from mp13_engine._adapter_files import base_model_name

    snapshot = tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M" / "snapshots" / "0a1b"
    model = SimpleNamespace(name_or_path=str(snapshot), config=SimpleNamespace(name_or_path=""))
    assert base_model_name(model) == "HuggingFaceTB/SmolLM2-135M"
    model.name_or_path = str(tmp_path / "my-model")  # a folder of the user's: as it is
    assert base_model_name(model) == str(tmp_path / "my-model")
