# SPDX-License-Identifier: Apache-2.0
"""Loading and configuration: typed errors, JSON round trip, placement options."""

from __future__ import annotations

import asyncio
import json
import re
import time

import attrs
import pytest

from mp13_engine import (
    AdapterError,
    ChatTemplateError,
    ConfigError,
    ConfigKeywordError,
    Engine,
    EngineClosedError,
    EngineConfig,
    FinishReason,
    MissingDependencyError,
    ModelLoadError,
    ModelNotFoundError,
    Mp13Error,
    NotCausalLMError,
    Request,
)


def test_missing_path_raises_model_not_found(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        Engine.load(str(tmp_path / "nope"), device="cpu")


def test_uncached_hub_id_says_download_first():
    with pytest.raises(ModelNotFoundError, match="download it first"):
        Engine.load("mp13-test-org/definitely-not-cached-model", device="cpu")


def test_encoder_is_not_a_causal_lm(tmp_path):
    from mp13_engine.testing import build_tiny_encoder

    path = build_tiny_encoder(tmp_path / "enc")
    with pytest.raises(NotCausalLMError, match="not a causal"):
        Engine.load(str(path), device="cpu")


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("dtype", "float64", "'bfloat16'"),
        ("quantization", "3bit", "'4bit'"),
        ("device", "tpu", "'cuda:N'"),
        ("max_batch_size", 0, ">= 1"),
        ("attn_implementation", "magic", "'sdpa'"),
    ],
)
def test_bad_config_field_names_field_and_allowed_values(field, value, allowed):
    with pytest.raises(ConfigError) as info:
        EngineConfig(model="x", **{field: value})
    assert field in str(info.value)
    assert allowed in str(info.value)


def test_unknown_config_field_lists_known_fields(tiny_model_path):
    with pytest.raises(ConfigError, match="max_batch_size"):
        Engine.load(str(tiny_model_path), max_batchsize=4)


def test_a_misspelt_config_keyword_is_a_config_error_naming_the_field_meant():
    """EngineConfig(max_new_token=5) raised attrs' bare TypeError, with no hint."""
    with pytest.raises(ConfigKeywordError) as caught:
        EngineConfig(model="m", max_new_token=5)
    message = str(caught.value)
    assert "EngineConfig got an unknown keyword 'max_new_token'" in message
    assert "did you mean 'default_max_new_tokens'?" in message
    assert "Valid keywords: model, device, dtype" in message
    assert isinstance(caught.value, ConfigError)
    assert isinstance(caught.value, Mp13Error)
    with pytest.raises(TypeError, match="did you mean 'max_batch_size'"):  # as it was caught
        EngineConfig(model="m", max_batchsize=4)
    # The dict and replace paths (Engine.load's keywords go through from_dict) say the same.
    for build in (
        lambda: EngineConfig.from_dict({"model": "m", "max_batchsize": 4}),
        lambda: EngineConfig(model="m").replace(max_batchsize=4),
    ):
        with pytest.raises(ConfigKeywordError, match=r"max_batchsize \(did you mean 'max_batch_s"):
            build()


def test_config_json_round_trip(tmp_path):
    cfg = EngineConfig(
        model=str(tmp_path), device="cpu", dtype="float32", max_batch_size=3, batch_wait_ms=0.5
    )
    path = tmp_path / "engine.json"
    assert cfg.to_json(path) + "\n" == path.read_text()
    assert EngineConfig.from_json(path) == cfg
    assert json.loads(path.read_text())["max_batch_size"] == 3
    # Without a path it only returns the text.
    assert json.loads(cfg.to_json()) == cfg.to_dict() and list(tmp_path.iterdir()) == [path]


def test_config_json_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "m", "dtype": "int3"}))
    with pytest.raises(ConfigError, match="dtype"):
        EngineConfig.from_json(bad)
    bad.write_text(json.dumps({"model": "m", "colour": "red"}))
    with pytest.raises(ConfigError, match="colour"):
        EngineConfig.from_json(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        EngineConfig.from_json(tmp_path / "missing.json")
    # A folder or a binary file was a bare IsADirectoryError / UnicodeDecodeError.
    with pytest.raises(ConfigError, match=r"^cannot read config file .*give a readable JSON file"):
        EngineConfig.from_json(tmp_path)
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=r"^cannot read config file .*UnicodeDecodeError"):
        EngineConfig.from_json(tmp_path / "binary.json")
    # A model given where the config file goes: say to load it with Engine.load.
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 8}))
    (tmp_path / "m.Q4_K_M.gguf").write_bytes(b"GGUF\x03\x00")
    for given, shown in [
        (model, model),
        (model / "config.json", model),
        (tmp_path / "m.Q4_K_M.gguf", tmp_path / "m.Q4_K_M.gguf"),
    ]:
        with pytest.raises(ConfigError) as info:
            EngineConfig.from_json(given)
        assert "not an EngineConfig file: load the model with " in str(info.value)
        assert f"Engine.load({str(shown)!r})" in str(info.value)
    with pytest.raises(ConfigError, match=r"^cannot write config file .*folder exists"):
        EngineConfig(model="m").to_json(tmp_path / "no" / "such" / "c.json")


def test_config_errors_say_what_to_fix(tmp_path):
    bad = tmp_path / "bad.json"
    for text, needle in [
        ("{model: m}", "is not valid JSON"),
        ('["model", "m"]', "must hold a JSON object of EngineConfig fields"),
    ]:
        bad.write_text(text)
        with pytest.raises(ConfigError, match=needle) as info:
            EngineConfig.from_json(bad)
        assert str(bad) in str(info.value)  # the message names the file
    bad.write_text('{"device": "cpu"}')
    with pytest.raises(ConfigError, match=r"EngineConfig\.model is required"):
        EngineConfig.from_json(bad)
    config = EngineConfig(model="m", device="cpu")
    assert config.replace(max_batch_size=3) == EngineConfig(
        model="m", device="cpu", max_batch_size=3
    )
    with pytest.raises(ConfigError, match=r"unknown EngineConfig field.* max_batchsize"):
        config.replace(max_batchsize=3)
    assert config.max_batch_size == 8  # replace made a copy
    with pytest.raises(ConfigError, match=r"Engine\.load needs a model"):
        Engine.load(device="cpu")
    with pytest.raises(ConfigError, match=r"Engine\.load got int; give an EngineConfig"):
        Engine.load(5)


def test_broken_model_directories_name_the_missing_part(tiny_model_path, tmp_path):
    import shutil

    def broken(name, *, remove=(), write=None, cut=()):
        copy = tmp_path / name
        shutil.copytree(tiny_model_path, copy)
        for file in remove:
            (copy / file).unlink()
        for file, text in (write or {}).items():
            (copy / file).write_text(text)
        for file in cut:  # a copy or download that stopped half way
            data = (copy / file).read_bytes()
            (copy / file).write_bytes(data[: len(data) // 2])
        return str(copy)

    config = json.loads((tiny_model_path / "config.json").read_text())
    wider = json.dumps({**config, "hidden_size": 2 * config["hidden_size"]})

    stray = tmp_path / "weights.bin"
    stray.write_bytes(b"not a model")
    cases = [
        (ModelNotFoundError, "is a file, but mp13 loads a model directory", str(stray)),
        (
            ModelLoadError,
            "cannot read the model config in .*config.json",
            broken("config", write={"config.json": "{not json"}),
        ),
        (
            ModelNotFoundError,
            "cannot read the weights in .*check the directory is complete",
            broken("weights", remove=["model.safetensors"]),
        ),
        (  # these two used to escape as safetensors' SafetensorError and a RuntimeError
            ModelLoadError,
            "cannot load the weights in .*incomplete metadata.*the weight files must be "
            "complete and come from the same checkpoint as its config.json",
            broken("cut", cut=["model.safetensors"]),
        ),
        (
            ModelLoadError,
            "cannot load the weights in .*ignore_mismatched_sizes.*come from the same checkpoint",
            broken("wider", write={"config.json": wider}),
        ),
        (
            ModelLoadError,
            "cannot load the tokenizer in .*the directory needs tokenizer files",
            broken("tokenizer", write={"tokenizer.json": "{oops"}),
        ),
        (  # transformers builds an empty tokenizer: every reply would be ''
            ModelLoadError,
            r"has no vocabulary \(2 token\(s\), special ones only\): its files are missing",
            broken("no-tokenizer", remove=["tokenizer.json"]),
        ),
        (
            ModelLoadError,
            r"has no vocabulary \(1 token\(s\)",
            broken("bare", remove=["tokenizer.json", "tokenizer_config.json"]),
        ),
    ]
    for error, needle, path in cases:
        with pytest.raises(error, match=needle):
            Engine.load(path, device="cpu")


def test_a_tokenizer_without_pad_token_pads_with_eos_and_an_empty_rendering_is_refused(
    tiny_model_factory, tmp_path
):
    """Llama 3 tokenizers ship without a pad token: eos pads (padding is masked, replies are
    the same); a chat template that renders nothing fails the request, with no model call."""
    import shutil

    llama3 = tiny_model_factory("llama3")
    nopad = tmp_path / "nopad"
    shutil.copytree(llama3, nopad)
    config = json.loads((nopad / "tokenizer_config.json").read_text())
    del config["pad_token"]
    (nopad / "tokenizer_config.json").write_text(json.dumps(config))
    with (
        Engine.load(str(nopad), device="cpu") as eng,
        Engine.load(str(llama3), device="cpu") as ref,
    ):
        assert eng.tokenizer.pad_token == eng.tokenizer.eos_token
        prompts = [Request(prompt=p, max_new_tokens=4) for p in ("a", "a longer prompt here")]
        assert [r.raw_text for r in eng.generate_many(prompts)] == [
            r.raw_text for r in ref.generate_many([attrs.evolve(p, id=None) for p in prompts])
        ]
    silent = tmp_path / "silent"  # chatml: no BOS either, so nothing at all is fed
    shutil.copytree(tiny_model_factory("chatml"), silent)
    (silent / "chat_template.jinja").write_text("{% for m in messages %}{% endfor %}")
    with Engine.load(str(silent), device="cpu") as eng:
        empty = eng.generate([{"role": "user", "content": "hi"}])
    assert empty.finish_reason is FinishReason.ERROR and empty.metrics.batch_size == 0
    assert (
        empty.error
        == f"invalid request {empty.id}: the prompt renders to no tokens; give some text"
    )


def test_attention_implementation_is_passed_to_transformers(tiny_model_path):
    with pytest.raises(ModelLoadError, match="needs a missing package: FlashAttention2"):
        Engine.load(str(tiny_model_path), device="cpu", attn_implementation="flash_attention_2")
    with Engine.load(model=str(tiny_model_path), device="cpu", attn_implementation="eager") as eng:
        assert eng.model.config._attn_implementation == "eager"
        eager = eng.generate("hi", max_new_tokens=4).raw_text
    with Engine.load(str(tiny_model_path), device="cpu") as eng:
        assert eng.generate("hi", max_new_tokens=4).raw_text == eager


def test_load_from_config_object_and_kwargs_agree(tiny_model_path):
    cfg = EngineConfig(model=str(tiny_model_path), device="cpu", max_batch_size=4)
    with (
        Engine.load(cfg, max_batch_size=2) as a,
        Engine.load(str(tiny_model_path), device="cpu") as b,
    ):
        assert a.config.max_batch_size == 2 and cfg.max_batch_size == 4
        assert b.config.max_batch_size == 8
        ra = a.generate("hi", max_new_tokens=4)
        rb = b.generate("hi", max_new_tokens=4)
        assert ra.raw_text == rb.raw_text
    assert a.closed and b.closed


def test_messages_without_chat_template(tmp_path):
    from mp13_engine.testing import build_tiny_model

    path = build_tiny_model(tmp_path / "nt", chat_template=False)
    with Engine.load(str(path), device="cpu") as engine:
        with pytest.raises(ChatTemplateError, match="no chat template"):
            engine.format_prompt([{"role": "user", "content": "hi"}])
        resp = engine.generate([{"role": "user", "content": "hi"}], max_new_tokens=3)
        assert resp.finish_reason is FinishReason.ERROR
        assert "chat template" in resp.error
        # raw prompts still work, and a plain string is a raw prompt here
        ok = engine.generate(Request(prompt="hello", max_new_tokens=3, min_new_tokens=3))
        assert ok.finish_reason is FinishReason.LENGTH
        assert engine.format_prompt("hello").endswith("hello")


def test_a_chat_template_that_is_not_valid_jinja_is_named_as_the_fault(tmp_path):
    """A broken template ended every chat request ERROR telling the user to check the roles
    and message shapes; it is the template's fault, and raw prompts still work."""
    from mp13_engine.testing import build_tiny_model

    path = build_tiny_model(tmp_path / "bad", chat_template=True)
    (path / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}")
    with Engine.load(str(path), device="cpu") as engine:
        with pytest.raises(ChatTemplateError, match=r"not valid Jinja \(line \d+: .*chat_template"):
            engine.format_prompt([{"role": "user", "content": "hi"}])
        resp = engine.generate([{"role": "user", "content": "hi"}], max_new_tokens=3)
        assert resp.finish_reason is FinishReason.ERROR and "not valid Jinja" in resp.error
        ok = engine.generate(Request(prompt="hello", max_new_tokens=3, min_new_tokens=3))
        assert ok.finish_reason is FinishReason.LENGTH


def test_aload_inside_running_loop(tiny_model_path):
    async def main():
        engine = await Engine.aload(str(tiny_model_path), device="cpu")
        try:
            resp = await engine.agenerate("hi", max_new_tokens=3, min_new_tokens=3)
            assert resp.metrics.completion_tokens == 3
        finally:
            await engine.aclose()
        return engine

    assert asyncio.run(main()).closed


def test_unknown_tool_format_and_missing_cuda_are_config_errors(tiny_model_path):
    import torch

    from mp13_engine import ToolFormatError

    with pytest.raises(ToolFormatError, match="hermes"):
        Engine.load(str(tiny_model_path), device="cpu", tool_format="smoke-signals")

    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            Engine.load(str(tiny_model_path), device="cuda")


def test_full_queue_rejects_with_error(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=1, max_queue=2) as eng:
        busy = eng.submit(Request(prompt="busy", max_new_tokens=1500, min_new_tokens=1500))
        deadline = time.monotonic() + 30
        while eng.metrics().running == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        queued = [eng.submit(Request(prompt=f"q{i}", max_new_tokens=2)) for i in range(2)]
        over = eng.generate(Request(prompt="one too many", max_new_tokens=2))
        assert over.finish_reason is FinishReason.ERROR
        assert over.error == (
            "the queue is full (2 of at most 2 requests queued); retry later or raise "
            "EngineConfig.max_queue"
        )
        eng.close()
        assert busy.result(10).finish_reason is FinishReason.CANCELLED
        assert all(q.result(10).finish_reason is FinishReason.CANCELLED for q in queued)


def test_threads_sending_at_once_never_overshoot_max_queue(tiny_model_path):
    """The queue-length check and the queueing were two steps: threads sending at the same
    moment could all pass the check. The check is slowed down here to widen that window."""
    import threading

    with Engine.load(str(tiny_model_path), device="cpu", max_batch_size=1, max_queue=2) as eng:
        busy = eng.submit(Request(prompt="busy", max_new_tokens=1500, min_new_tokens=1500))
        deadline = time.monotonic() + 30
        while eng.metrics().running == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        depth = eng._worker.depth

        def slow_depth():
            counts = depth()
            time.sleep(0.05)  # every thread reads the depth before any has queued
            return counts

        eng._worker.depth = slow_depth
        futures = []
        start = threading.Barrier(4)

        def send(i):
            start.wait()
            futures.append(eng.submit(Request(prompt=f"q{i}", max_new_tokens=2)))

        threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        refused = [f.result(10) for f in futures if f.done()]
        assert len(refused) == 2
        assert all("the queue is full" in r.error for r in refused)
        assert eng.metrics().queue_depth == 2
        eng.close()
        assert busy.result(10).finish_reason is FinishReason.CANCELLED


def _leftovers(eng: Engine) -> dict[str, int]:
    """What the engine still holds for requests: all zero once every request has ended."""
    worker, loop = eng._worker, eng._worker._loop
    return {
        "inflight": len(eng._inflight),
        "queued+running": sum(worker.depth()),
        "active": len(worker._active),
        "rows": len(loop.running) + len(loop.prefills),
        "kv rows": len(loop.kv.lens),
        "deadlines": len(worker._watchdog._live),
    }


def _settle(eng: Engine) -> dict[str, int]:
    """``_leftovers`` once the worker has finished its step: a request resolves as its last
    token is chosen, and its row leaves the loop later in that step (a cancelled one at the
    next)."""
    deadline = time.monotonic() + 30
    while any(_leftovers(eng).values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return _leftovers(eng)


def test_a_thousand_requests_at_once_all_end_and_leave_nothing_behind(tiny_model_path):
    idle = dict.fromkeys(
        ("inflight", "queued+running", "active", "rows", "kv rows", "deadlines"), 0
    )
    config = {"max_batch_size": 16, "request_timeout_s": 120.0, "metrics_window": 64}
    with Engine.load(str(tiny_model_path), device="cpu", **config) as eng:
        done = eng.generate_many([Request(prompt=f"p {i}", max_new_tokens=2) for i in range(1000)])
        assert {r.finish_reason for r in done} <= {FinishReason.LENGTH, FinishReason.STOP}
        assert all(r.error is None for r in done)
        assert _settle(eng) == idle
        assert len(eng._metrics._entries) == 64  # the window, not every request
        # A thousand more, queued and running, cancelled at once: each ends, none hangs.
        sent = [Request(prompt=f"q {i}", max_new_tokens=50) for i in range(1000)]
        futures = [eng.submit(r) for r in sent]
        cancelled = sum(eng.cancel(r.id) for r in sent)
        ended = [f.result(timeout=60) for f in futures]
        assert cancelled == sum(r.finish_reason is FinishReason.CANCELLED for r in ended)
        assert cancelled >= 900  # all but the few that ended first
        assert _settle(eng) == idle
        metrics = eng.metrics()
        assert metrics.total_requests == 2000 and metrics.queue_depth == metrics.running == 0
        assert eng.generate(Request(prompt="still serving", max_new_tokens=2)).ok


def test_a_group_larger_than_the_queue_is_refused_saying_so(tiny_model_path):
    # An idle engine: "the queue is full; retry later" would never come true.
    with Engine.load(str(tiny_model_path), device="cpu", max_queue=2) as eng:
        group = eng.generate_many([Request(prompt=f"q{i}", max_new_tokens=2) for i in range(3)])
        assert {r.finish_reason for r in group} == {FinishReason.ERROR}
        assert group[0].error == (
            "3 requests sent together are more than the queue holds (EngineConfig.max_queue=2); "
            "send at most 2 at once or raise EngineConfig.max_queue"
        )
        two = [Request(prompt=p, max_new_tokens=2) for p in ("a", "b")]
        assert all(r.ok for r in eng.generate_many(two))  # a group that fits is served


def test_hub_id_in_the_local_cache_loads_offline(tmp_path, monkeypatch, tiny_model_path):
    # Lay the tiny model out exactly as huggingface_hub caches a download
    # (models--org--name/{refs/main, snapshots/<commit>/...}) and load it by hub id.
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--mp13-test--tiny-chatml"
    shutil.copytree(tiny_model_path, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    # HF_HUB_CACHE is read when huggingface_hub is imported; point the live constant instead.
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with Engine.load("mp13-test/tiny-chatml", device="cpu") as engine:
        resp = engine.generate(Request(prompt="hello", max_new_tokens=3))
    assert resp.finish_reason is FinishReason.LENGTH
    assert resp.metrics.completion_tokens == 3


def _abandon(engine_path, adapter_dir=None):
    """Use an engine the way a notebook cell does, never close it; return its worker thread
    and a weak reference to its model."""
    import weakref

    engine = Engine.load(str(engine_path), device="cpu")
    if adapter_dir is not None:
        engine.adapters.load(adapter_dir, name="a")
        engine.generate(Request(prompt="hi", adapters=["a"], max_new_tokens=2))
    engine.generate_many([Request(prompt="hi", max_new_tokens=2)] * 2)
    for _ in engine.stream(Request(prompt="hi", max_new_tokens=2)):
        pass
    return engine._worker._thread, weakref.ref(engine.model)


@pytest.mark.parametrize("with_adapter", [False, True], ids=["plain", "adapter"])
def test_an_engine_nobody_holds_stops_its_worker_and_frees_its_model(
    tiny_model_path, tmp_path, with_adapter
):
    import gc

    adapter_dir = None
    if with_adapter:
        from tests.engine.test_adapters import _peft_adapter

        adapter_dir = tmp_path / "a"
        _peft_adapter(tiny_model_path, adapter_dir, seed=1)
    thread, model = _abandon(tiny_model_path, adapter_dir)
    deadline = time.monotonic() + 10
    while (thread.is_alive() or model() is not None) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert not thread.is_alive()
    assert model() is None


@pytest.mark.parametrize("close", ["close", "aclose"])
def test_closing_frees_the_model_and_the_prefix_cache_while_the_engine_is_still_held(
    tiny_model_path, tmp_path, close
):
    """Was: a closed engine kept its model (and up to prefix_cache_mb of cached keys and
    values) for as long as the variable held it, so ``with Engine.load(a) as e: ...`` then
    ``Engine.load(b)`` in a notebook needed memory for both models."""
    import asyncio
    import gc
    import weakref

    from mp13_engine import EngineClosedError, TrainingConfig

    engine = Engine.load(str(tiny_model_path), device="cpu")
    engine.generate(Request(prompt="fill the prefix cache " * 20, max_new_tokens=2))
    assert engine.metrics().prefix_cache.bytes > 0
    model = weakref.ref(engine.model)
    if close == "close":
        engine.close()
    else:
        asyncio.run(engine.aclose())
    gc.collect()
    assert model() is None and engine.model is None
    assert engine.metrics().prefix_cache.bytes == 0
    # What needs no model still works; what needs it says the engine is closed.
    assert engine.count_tokens("hello") > 0 and engine.format_prompt("hello")
    assert engine.metrics().total_requests == 1
    with pytest.raises(EngineClosedError):
        engine.generate("hello")
    data = tmp_path / "data.jsonl"
    data.write_text(
        '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}\n'
    )
    with pytest.raises(EngineClosedError):  # was: the config and dataset checks ran first
        engine.train(TrainingConfig(adapter="late", dataset=str(tmp_path / "missing.jsonl")))
    with pytest.raises(EngineClosedError):
        engine.train(TrainingConfig(adapter="late", dataset=str(data), max_steps=1))
    engine.close()  # closing twice does nothing


def test_closing_in_a_done_callback_frees_the_model_once_the_worker_stops(tiny_model_path):
    """Was: ``close()`` from a future's done-callback runs on the worker thread, which had
    not stopped yet when close() returned, so the model stayed for as long as the engine
    object did."""
    import gc
    import weakref

    engine = Engine.load(str(tiny_model_path), device="cpu")
    model = weakref.ref(engine.model)
    others = [engine.submit(Request(prompt=f"k{i}", max_new_tokens=200)) for i in range(3)]
    first = engine.submit(Request(prompt="first", max_new_tokens=1))
    first.add_done_callback(lambda _: engine.close())
    assert first.result(timeout=30).finish_reason is FinishReason.LENGTH
    for fut in others:  # they ran beside it: each is answered, none hangs
        assert fut.result(timeout=30).finish_reason in (FinishReason.CANCELLED, FinishReason.LENGTH)
    deadline = time.monotonic() + 30
    while model() is not None or not engine._worker.stopped:
        assert time.monotonic() < deadline
        gc.collect()
        time.sleep(0.01)
    assert engine.closed and engine.model is None
    with pytest.raises(EngineClosedError):
        engine.generate("hello")


def test_a_request_sent_as_another_thread_closes_the_engine_is_not_left_in_flight(
    tiny_model_path,
):
    """Closed between the open check and the queueing: the caller got EngineClosedError,
    but the request stayed in flight unresolved (its future pending, its id taken)."""
    from mp13_engine import EngineClosedError

    engine = Engine.load(str(tiny_model_path), device="cpu")
    announce = engine._worker.preparing

    def closing_meanwhile(delta: int) -> None:
        announce(delta)
        if delta > 0:
            engine.close()  # as another thread would, while this request is prepared

    engine._worker.preparing = closing_meanwhile
    req = Request(prompt="too late", max_new_tokens=2)
    with pytest.raises(EngineClosedError, match="closed"):
        engine.generate(req)
    assert not engine._inflight and engine.cancel(req.id) is False
    assert engine.metrics().total_requests == 1  # it ended (ERROR), counted as refused


_DEVICE_MAP_REQUESTS = [
    Request(messages=[{"role": "user", "content": "hi"}], max_new_tokens=8),
    Request(
        messages=[{"role": "user", "content": "tell me"}],
        max_new_tokens=8,
        min_new_tokens=4,
        do_sample=True,
        seed=3,
        temperature=0.9,
        repetition_penalty=1.2,
    ),
]


@pytest.mark.parametrize(
    "placement",
    [
        pytest.param({"device_map": "auto"}, id="auto"),
        pytest.param({"device_map": {"": "cpu"}}, id="whole-model"),
        pytest.param({"device_map": "auto", "max_memory": {"cpu": "4GiB"}}, id="max-memory"),
        # Too little memory for anything: accelerate offloads the weights to disk.
        pytest.param({"device_map": "auto", "max_memory": {"cpu": "100KB"}}, id="disk-offload"),
    ],
)
def test_a_device_mapped_model_gives_the_same_replies(tiny_model_path, placement):
    with Engine.load(str(tiny_model_path), device="cpu") as plain:
        expected = [r.raw_text for r in plain.generate_many(_DEVICE_MAP_REQUESTS)]
    with Engine.load(str(tiny_model_path), **placement) as mapped:
        assert mapped.device == "cpu"
        got = mapped.generate_many(_DEVICE_MAP_REQUESTS)
    assert [r.error for r in got] == [None, None]
    assert [r.raw_text for r in got] == expected


def test_adapters_on_disk_offloaded_layers_are_refused_clearly(tiny_model_path, tmp_path):
    from tests.engine.test_adapters import _peft_adapter

    _peft_adapter(tiny_model_path, tmp_path / "a", seed=1)
    with Engine.load(
        str(tiny_model_path), device_map="auto", max_memory={"cpu": "100KB"}
    ) as engine:
        with pytest.raises(AdapterError, match="offloaded by its device_map"):
            engine.adapters.load(tmp_path / "a")
        assert engine.generate("hi", max_new_tokens=2).ok  # still serving


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"device_map": "everywhere"}, "device_map='everywhere' is not allowed"),
        ({"device_map": {"": "gpu"}}, "'cuda:N', 'cpu' or 'disk'"),
        ({"device": "cpu", "device_map": "auto"}, "leave device at 'auto'"),
        ({"max_memory": {"0": "1GiB"}}, "only applies with a device_map"),
        ({"device_map": "auto", "max_memory": {"gpu0": "1GiB"}}, "GPU index"),
    ],
)
def test_device_map_settings_are_checked(fields, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        EngineConfig(model="m", **fields)


def test_device_map_round_trips_through_json(tmp_path):
    config = EngineConfig(model="m", device_map={"": 0, "lm_head": "cpu"}, max_memory={"0": "2GiB"})
    config.to_json(tmp_path / "c.json")
    assert EngineConfig.from_json(tmp_path / "c.json") == config


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"device": "cuda"}, "device='cuda' names a GPU but CUDA is not available here"),
        ({"device": "cuda:1"}, "names a GPU but CUDA is not available"),
        ({"device_map": {"": "cuda:0"}}, "names a GPU but CUDA is not available here; map"),
        ({"device_map": {"": "cpu", "lm_head": 0}}, "names a GPU but CUDA is not available"),
        ({"device": "mps"}, "MPS (Apple-silicon GPU) is not available here; use device='cpu'"),
        (
            {"device_map": "auto", "max_memory": {"0": "1GiB", "cpu": "1GiB"}},
            "max_memory={'0': '1GiB', 'cpu': '1GiB'} names a GPU but CUDA is not available "
            "here; cap only 'cpu' here, or drop max_memory",
        ),
    ],
)
def test_a_gpu_this_machine_lacks_is_a_config_error_before_any_weights_load(
    tiny_model_path, monkeypatch, fields, message
):
    """device_map={"": "cuda:0"} on a CPU machine used to end in torch's bare AssertionError
    ("Torch not compiled with CUDA enabled"), {"": 0} in advice to check the weight files,
    and device="mps" in a RuntimeError; each is now the ConfigError that says what to use."""
    import torch
    import transformers

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)

    def never(*args, **kwargs):
        raise AssertionError("the weights were read before the placement was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    with pytest.raises(ConfigError, match=re.escape(message)):
        Engine.load(str(tiny_model_path), **fields)


def test_a_gpu_index_past_the_machines_gpus_is_named(tiny_model_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=re.escape("names GPU 2 but this machine has 2 (cuda:0")):
        Engine.load(str(tiny_model_path), device="cuda:2")
    with pytest.raises(ConfigError, match=r"names GPU 3, 5 but .*or drop device_map"):
        Engine.load(str(tiny_model_path), device_map={"a": 5, "b": "cuda:3", "c": 1})


def test_a_folder_without_a_model_says_what_it_holds(tiny_model_path, tmp_path):
    """transformers' own message for these sent the user after a model_type key in a
    config.json that was not there."""
    import shutil

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelNotFoundError, match=r"is a folder without a model: no config\.json"):
        Engine.load(empty, device="cpu")
    named_gguf = tmp_path / "model.gguf"  # a folder, named like a file
    named_gguf.mkdir()
    with pytest.raises(ModelNotFoundError, match=r"no config\.json .* and no \.gguf file"):
        Engine.load(named_gguf, device="cpu")
    parent = tmp_path / "models"
    shutil.copytree(tiny_model_path, parent / "tiny")
    with pytest.raises(ModelNotFoundError) as info:
        Engine.load(parent, device="cpu")
    assert str(info.value).endswith(f"(here: {parent / 'tiny'})")
    adapter = tmp_path / "my-adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ModelNotFoundError, match=r"holds a LoRA adapter .*engine\.adapters\.load"):
        Engine.load(adapter, device="cpu")
    with Engine.load(parent / "tiny", device="cpu") as engine:  # the path the error named
        assert engine.generate("hi", max_new_tokens=2).ok


def test_a_missing_optional_package_is_a_missing_dependency_error_with_a_way_round(
    tiny_model_path, monkeypatch
):
    """transformers raises ImportError for a missing bitsandbytes or flash-attn; it is the
    tree's MissingDependencyError (still a ModelLoadError), naming the option to drop."""
    import transformers

    def missing(*args, **kwargs):
        raise ImportError("requires bitsandbytes: `pip install -U bitsandbytes`")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", missing)
    with pytest.raises(MissingDependencyError) as info:
        Engine.load(str(tiny_model_path), device="cpu", quantization="8bit")
    assert isinstance(info.value, (ModelLoadError, ImportError))
    assert str(info.value).endswith(
        "pip install -U bitsandbytes`; install it and retry, or load with quantization=None"
    )
    with pytest.raises(MissingDependencyError, match=r"attn_implementation='sdpa'$") as info:
        Engine.load(str(tiny_model_path), device="cpu", attn_implementation="flash_attention_2")
    assert ".;" not in str(info.value)  # transformers' sentence and ours join cleanly


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("fp16", "(for 'fp16' write 'float16')"),
        ("half", "(for 'half' write 'float16')"),
        ("BF16", "(for 'BF16' write 'bfloat16')"),
        ("flaot32", "(did you mean 'float32'?)"),
    ],
)
def test_other_dtype_spellings_are_refused_naming_the_one_to_write(value, hint):
    with pytest.raises(ConfigError) as info:
        EngineConfig(model="m", dtype=value)
    assert str(info.value) == (
        f"EngineConfig.dtype={value!r} is not allowed; use one of 'auto', 'float32', "
        f"'bfloat16', 'float16' {hint}"
    )


def test_a_torch_dtype_is_refused_naming_its_string():
    import torch

    with pytest.raises(ConfigError, match=re.escape("(for torch.float16 write 'float16')")):
        EngineConfig(model="m", dtype=torch.float16)
    assert EngineConfig(model="m", dtype="float16").dtype == "float16"


def test_a_device_name_given_as_device_map_says_to_use_device():
    with pytest.raises(ConfigError, match=re.escape("one device: device='cuda', no device_map")):
        EngineConfig(model="m", device_map="cuda")


@pytest.mark.parametrize("download", [False, True])
def test_a_named_model_given_as_a_hub_id_says_to_fetch_it(tmp_path, monkeypatch, download):
    """Engine.load("smollm2-135m") used to suggest `hf download smollm2-135m` (a hub repo
    that does not exist) and, with download=True, to ask the hub for it."""
    from mp13_engine.models._catalog import CATALOG

    monkeypatch.setenv("MP13_MODELS_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as info:
        Engine.load("SmolLM2-135M", device="cpu", download=download)
    text = str(info.value)
    assert "one of mp13's named models, not a hub id" in text
    assert "mp13_engine.models.fetch('smollm2-135m')" in text
    assert "hf download" not in text and "fetched already" not in text
    entry = CATALOG["smollm2-135m"]  # as a finished fetch leaves it
    (tmp_path / "smollm2-135m").mkdir()
    (tmp_path / "smollm2-135m" / "mp13_model.json").write_text(
        json.dumps({"requirement": entry.requirement, "sha256": entry.sha256})
    )
    with pytest.raises(ModelNotFoundError) as info:
        Engine.load("smollm2-135m", device="cpu", download=download)
    assert str(info.value).endswith(
        f"it is fetched already, so Engine.load({str(tmp_path / 'smollm2-135m')!r}) loads it"
    )


def test_a_progress_that_is_not_a_function_is_refused_even_when_nothing_would_report(
    tiny_model_path,
):
    """progress=True failed only when a GGUF was first converted (TypeError: 'bool' object
    is not callable, mid-load) and was silently ignored otherwise."""
    with pytest.raises(ConfigError, match=r"Engine\.load\(progress=True\) is not allowed"):
        Engine.load(str(tiny_model_path), device="cpu", progress=True)
    seen: list[object] = []
    with Engine.load(str(tiny_model_path), device="cpu", progress=seen.append) as engine:
        assert engine.generate("hi", max_new_tokens=2).ok
    # A checkpoint folder has no slow first-time step to report; only reading the weights.
    assert {r.stage for r in seen} == {"load"}


def test_a_file_inside_a_model_folder_or_a_config_file_says_what_to_give(tiny_model_path, tmp_path):
    """Engine.load(".../model.safetensors") or Engine.load("engine.json") said only "give the
    directory"; it now names the folder that holds the model, or how to load a config file."""
    for inside in ("model.safetensors", "config.json"):
        with pytest.raises(ModelNotFoundError) as info:
            Engine.load(tiny_model_path / inside, device="cpu")
        assert str(info.value).endswith(f"give the folder that holds it: {str(tiny_model_path)!r}")
    config_file = tmp_path / "engine.json"
    EngineConfig(model=str(tiny_model_path), device="cpu").to_json(config_file)
    with pytest.raises(ModelNotFoundError, match=re.escape("EngineConfig.from_json(path)")):
        Engine.load(config_file)
    with Engine.load(EngineConfig.from_json(config_file)) as engine:  # what the error says
        assert engine.generate("hi", max_new_tokens=2).ok


def test_loading_the_weights_reports_to_progress_instead_of_drawing_a_bar(tiny_model_path, capfd):
    """Engine.load(progress=...) still let transformers draw its "Loading weights" bar on
    the caller's stderr. The bar of this load now reports to progress (stage "load"); bars
    the load does not make, and loads without progress, go to the hook that was there."""
    import threading

    from transformers.utils import logging as hf_logging

    from mp13_engine import Engine

    made: list[str] = []

    def users_hook(factory, args, kwargs):
        made.append(str(kwargs.get("desc")))
        return factory(*args, **{**kwargs, "disable": True})

    previous = hf_logging.set_tqdm_hook(users_hook)
    try:
        reports = []
        other = []

        def progress(report):
            reports.append(report)
            if not other:  # another thread's bar meanwhile: not this load's
                thread = threading.Thread(target=lambda: other.append(hf_logging.tqdm(desc="x")))
                thread.start()
                thread.join()

        with Engine.load(str(tiny_model_path), device="cpu", progress=progress):
            pass
        assert made == ["x"]
        loads = [r for r in reports if r.stage == "load"]
        assert loads[0].done == 0 and loads[-1].done == loads[-1].total > 0
        assert 2 <= len(loads) <= 22  # about every 5%, never a line per tensor
        assert loads[-1].message == f"loading weights: {loads[-1].total} of {loads[-1].total}"
        assert "Loading weights" not in capfd.readouterr().err
        with Engine.load(str(tiny_model_path), device="cpu"):
            pass
        assert made == ["x", "Loading weights"]  # no progress: transformers' bar, as it was
    finally:
        assert hf_logging.set_tqdm_hook(previous) is users_hook  # put back after each load


def test_a_transformers_without_the_bar_hook_still_loads_with_progress(
    tiny_model_path, monkeypatch
):
    """set_tqdm_hook is newer than transformers 5.0, which the requirement allows: without
    it, a load with progress= goes on (transformers draws its bar, as before)."""
    from transformers.utils import logging as hf_logging

    from mp13_engine import Engine

    monkeypatch.delattr(hf_logging, "set_tqdm_hook")
    reports = []
    with Engine.load(str(tiny_model_path), device="cpu", progress=reports.append) as engine:
        assert engine.generate("hi", max_new_tokens=2).ok
    assert all(r.stage != "load" for r in reports)
