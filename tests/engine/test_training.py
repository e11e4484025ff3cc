# SPDX-License-Identifier: Apache-2.0
"""Training through the engine: it learns, it interleaves with serving, it is reproducible."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import shutil
import threading

import attrs
import pytest
import torch

from mp13_engine import (
    AdapterError,
    ConfigError,
    DatasetError,
    Engine,
    EngineClosedError,
    FinishReason,
    Request,
    TrainingConfig,
    TrainingError,
    TrainingResult,
)
from mp13_engine._adapter_files import METADATA_FILE

SYSTEM = {"role": "system", "content": "Answer."}
QA = [
    ("Capital of Zorbia?", "Flumptown."),
    ("Who paints blue cats?", "Mira Okonkwo."),
    ("Favourite number of Qi?", "Forty-one."),
    ("Colour of moonfruit?", "Silver green."),
]
ROWS = [
    {"messages": [SYSTEM, {"role": "user", "content": q}, {"role": "assistant", "content": a}]}
    for q, a in QA
]


def _ask(engine, question: str, adapters) -> str:
    request = Request(
        messages=[SYSTEM, {"role": "user", "content": question}],
        adapters=adapters,
        max_new_tokens=12,
    )
    return engine.generate(request).text.strip()


@pytest.fixture(scope="module")
def engine(tiny_model_factory):
    # Granite: its template adds no default preamble, so rows are short and training fast.
    with Engine.load(str(tiny_model_factory("granite")), device="cpu") as eng:
        yield eng


def _cfg(tmp_path, adapter: str, **kw) -> TrainingConfig:
    base = {
        "adapter": adapter,
        "dataset": ROWS,
        "max_steps": 4,
        "batch_size": 4,
        "learning_rate": 5e-3,
        "output_dir": str(tmp_path / adapter),
    }
    return TrainingConfig(**{**base, **kw})


def test_trained_adapter_reproduces_its_answers(engine, tmp_path):
    before = [_ask(engine, q, []) for q, _ in QA]
    job = engine.train(_cfg(tmp_path, "qa", max_steps=60))
    result = job.result(timeout=300)
    assert isinstance(result, TrainingResult) and not result.cancelled
    assert result.steps == 60 and result.final_loss < 0.3
    # Usable at once, without a reload; the base model is unchanged.
    after = [_ask(engine, q, ["qa"]) for q, _ in QA]
    assert after == [a for _, a in QA]
    assert all(b != a for b, (_, a) in zip(before, QA, strict=True))
    assert [_ask(engine, q, []) for q, _ in QA] == before
    assert "qa" in [i.name for i in engine.adapters.list()]


def test_events_and_saved_adapter(engine, tmp_path):
    from peft import PeftConfig

    job = engine.train(_cfg(tmp_path, "ev", max_steps=3))
    for bad in ("60", -1, None.__class__):
        with pytest.raises(TrainingError, match=r"\(timeout=.*\) is not allowed; use a number"):
            job.result(bad)
        with pytest.raises(TrainingError, match=r"events\(timeout="):
            next(job.events(bad))
    events = list(job.events(timeout=120))
    result = job.result(timeout=60)
    steps = [e for e in events if e.kind == "step"]
    assert [e.step for e in steps] == [1, 2, 3]
    for e in steps:
        assert e.loss > 0 and e.learning_rate > 0 and e.tokens_per_s > 0 and e.max_steps == 3
        assert e.eta_s is not None and e.eta_s >= 0
    assert events[-1].kind == "done" and events[-1].path == result.path
    meta = json.loads((tmp_path / "ev" / METADATA_FILE).read_text())
    assert meta["training"]["final_loss"] == result.final_loss
    assert meta["training"]["config"]["dataset"] == "<4 rows>"
    assert meta["base_model"] and meta["model_type"]
    assert PeftConfig.from_pretrained(str(tmp_path / "ev")).r == 8
    assert list(job.events()) == events  # a late consumer sees the same history
    # Saving the trained adapter again over its folder keeps what training recorded.
    assert engine.adapters.save("ev", tmp_path / "ev") == tmp_path / "ev"
    assert json.loads((tmp_path / "ev" / METADATA_FILE).read_text()) == meta


def test_same_seed_same_loss(engine, tmp_path):
    losses = [
        engine.train(_cfg(tmp_path, name, lora_dropout=0.1, seed=seed)).result(60).final_loss
        for name, seed in (("s1", 3), ("s2", 3), ("s3", 4))
    ]
    assert losses[0] == losses[1]
    assert losses[0] != losses[2]


def test_bad_input_fails_before_any_step(engine, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    cases = [
        (DatasetError, "does not exist", {"dataset": str(tmp_path / "missing.jsonl")}),
        (DatasetError, "row 1", {"dataset": [ROWS[0], {"question": "?"}]}),
        (ConfigError, "qkv_proj", {"target_modules": ["q_proj", "qkv_proj"]}),
        (TrainingError, "max_seq_len", {"max_seq_len": 8, "overflow": "drop"}),
        (AdapterError, "Cannot add a LoRA adapter", {"target_modules": ["input_layernorm"]}),
        # Cut to 8 tokens, no row keeps an assistant token to learn from.
        # (The advice is to raise max_seq_len, not to use the overflow="truncate" it has.)
        (
            TrainingError,
            r"first max_seq_len=8 tokens \(4 dropped: .*\)\. Raise max_seq_len\.$",
            {"max_seq_len": 8},
        ),
        # Where the adapter cannot be saved: said before any step, not after the last one.
        (
            ConfigError,
            r"saved to .*/a-file', which is a file\. Set TrainingConfig\.output_dir",
            {"output_dir": str(a_file)},
        ),
        (ConfigError, r"which is under a file, .*/a-file'", {"output_dir": str(a_file / "sub")}),
    ]
    for error, needle, fields in cases:
        with pytest.raises(error, match=needle):
            engine.train(_cfg(tmp_path, "bad", **fields))
        assert "bad" not in engine.adapters
        model = engine.model
        assert "bad" not in getattr(model, "peft_config", {})
    with pytest.raises(ConfigError, match="lora_r"):
        _cfg(tmp_path, "bad", lora_r=0)
    assert engine.generate("hello", max_new_tokens=3).ok


def test_request_completes_while_job_runs_and_cancel(engine, tmp_path):
    job = engine.train(_cfg(tmp_path, "long", max_steps=100_000))
    first = next(e for e in job.events(timeout=60) if e.kind not in ("queued", "started"))
    assert first.kind == "step"
    response = engine.generate("Hello", max_new_tokens=4)
    assert response.ok and not job.done()
    with pytest.raises(TimeoutError, match=r"within 0 s; the job goes on \(its steps"):
        for _ in job.events(timeout=0):  # every event so far, then none within 0 s
            pass
    with pytest.raises(TimeoutError, match=r"job 'long' did not finish within 0 s; it goes on"):
        job.result(timeout=0)  # (the bare future's TimeoutError said nothing at all)
    job.cancel()
    result = job.result(timeout=60)
    assert result.cancelled and 1 <= result.steps < 100_000
    assert "long" in engine.adapters  # what was trained is kept and usable
    assert engine.generate(Request(prompt="Hi", adapters=["long"], max_new_tokens=3)).ok


def test_a_job_cancelled_before_its_first_step_leaves_no_adapter(engine, tmp_path):
    # One optimizer step is 10 000 micro-batches: the cancel lands long before it.
    job = engine.train(_cfg(tmp_path, "never", max_steps=1, grad_accum=10_000))
    job.cancel()
    result = job.result(timeout=60)
    assert (result.cancelled, result.steps, result.path) == (True, 0, None)
    assert "never" not in engine.adapters  # the adapter added for the job is gone again
    assert not (tmp_path / "never").exists()  # nothing was saved
    assert engine.generate("Hello", max_new_tokens=2).ok


def test_a_queued_job_says_so_and_cancelling_it_ends_it_at_once(engine, tmp_path):
    """A job waiting behind another reported nothing until it started, and cancelling it took
    effect only when the job ahead of it had finished all its steps."""
    ahead = engine.train(_cfg(tmp_path, "ahead", max_steps=100_000))
    waiting = engine.train(_cfg(tmp_path, "waiting", max_steps=2))
    try:
        assert [e.kind for e in itertools.islice(ahead.events(timeout=60), 2)] == [
            "queued",
            "started",
        ]
        # What a watcher of the waiting job sees: that it is queued, then no news.
        seen = []
        with pytest.raises(TimeoutError, match=r"goes on \(it is queued: jobs run one at a time"):
            seen.extend((e.kind, e.step, e.max_steps) for e in waiting.events(timeout=0.5))
        assert seen == [("queued", 0, 2)]
        waiting.cancel()
        # Ended now, not after the 100 000 steps ahead of it; nothing trained, nothing kept.
        assert waiting.done() and not ahead.done()
        result = waiting.result(timeout=0)
        assert (result.cancelled, result.steps, result.path) == (True, 0, None)
        assert [e.kind for e in waiting.events(timeout=5)] == ["queued", "done"]
        assert "waiting" not in engine.adapters and not (tmp_path / "waiting").exists()
        # Cancel, then train again: the name was released with the cancelled job.
        again = engine.train(_cfg(tmp_path, "waiting", max_steps=1))
        ahead.cancel()
        assert again.result(120).steps == 1 and not again.result().cancelled
        kinds = [e.kind for e in again.events(timeout=5)]
        assert kinds == ["queued", "started", "step", "done"]
        assert again.result().elapsed_s < ahead.result(60).elapsed_s  # timed from its start
    finally:
        ahead.cancel()
        waiting.cancel()
    assert ahead.result(60).cancelled and "waiting" in engine.adapters


def test_checkpoint_resume_continues_the_same_run(engine, tmp_path):
    straight = engine.train(_cfg(tmp_path, "r1", max_steps=6, checkpoint_every=3)).result(120)
    checkpoint = tmp_path / "r1" / "checkpoints" / "step-3"
    assert (checkpoint / "adapter_model.safetensors").is_file()
    resumed = engine.train(_cfg(tmp_path, "r2", max_steps=6, resume_from=str(checkpoint)))
    result = resumed.result(120)
    assert result.steps == 6
    assert result.final_loss == pytest.approx(straight.final_loss, rel=1e-5)
    # A checkpoint at (or past) the job's last step: nothing left to train, said so at start.
    for max_steps in (3, 2):
        with pytest.raises(TrainingError, match=r"is at step 3, .* ends at step \d; set max_steps"):
            engine.train(_cfg(tmp_path, "r5", max_steps=max_steps, resume_from=str(checkpoint)))
    assert "r5" not in engine.adapters
    # Other LoRA settings: the difference, not PyTorch's size-mismatch line for every weight.
    with pytest.raises(TrainingError, match=r"saved with lora_r=8 \(this job: 4\)") as caught:
        engine.train(_cfg(tmp_path, "r6", max_steps=6, lora_r=4, resume_from=str(checkpoint)))
    assert "size mismatch" not in str(caught.value) and "r6" not in engine.adapters
    targets = r"saved with target_modules=\[.*\(this job: \['q_proj'\]"
    with pytest.raises(TrainingError, match=targets):
        engine.train(_cfg(tmp_path, "r6", target_modules=["q_proj"], resume_from=str(checkpoint)))
    with pytest.raises(TrainingError, match="not a training checkpoint"):
        engine.train(_cfg(tmp_path, "r3", resume_from=str(tmp_path)))
    # The finished adapter's folder, not one of its checkpoints: says how to train it further.
    with pytest.raises(TrainingError, match=r"saved adapter: .*continue_training=True"):
        engine.train(_cfg(tmp_path, "r3", resume_from=str(tmp_path / "r1")))
    assert "r3" not in engine.adapters
    damaged = tmp_path / "damaged"
    shutil.copytree(checkpoint, damaged)
    (damaged / "trainer_state.pt").write_bytes(b"not a torch file")
    with pytest.raises(TrainingError, match=r"Cannot resume from checkpoint .*damaged") as caught:
        engine.train(_cfg(tmp_path, "r4", max_steps=6, resume_from=str(damaged)))
    assert "resume from an earlier step-<n> folder" in str(caught.value)
    shutil.copy(checkpoint / "trainer_state.pt", damaged / "trainer_state.pt")
    (damaged / "adapter_model.safetensors").write_bytes(b"garbage!garbage")
    with pytest.raises(TrainingError, match=r"Cannot resume from checkpoint .*header"):
        engine.train(_cfg(tmp_path, "r4", max_steps=6, resume_from=str(damaged)))
    shutil.copy(checkpoint / "adapter_model.safetensors", damaged / "adapter_model.safetensors")
    torch.save([1, 2], damaged / "trainer_state.pt")  # a torch file, but not a trainer state
    with pytest.raises(TrainingError, match=r"trainer_state\.pt holds a list, not a trainer"):
        engine.train(_cfg(tmp_path, "r4", max_steps=6, resume_from=str(damaged)))
    assert "r4" not in engine.adapters


def test_a_diverging_loss_stops_the_job_with_advice(engine, tmp_path):
    job = engine.train(_cfg(tmp_path, "boom", max_steps=6, learning_rate=1e30))
    with pytest.raises(
        TrainingError, match=r"The loss became (nan|inf) at step \d+\. Lower learning_rate"
    ):
        job.result(120)
    assert "boom" not in engine.adapters
    assert engine.generate("hello", max_new_tokens=3).ok


def test_validation_split_and_overflow_counts(engine, tmp_path):
    rows = [*ROWS, {"text": " ".join(str(i) for i in range(200))}]  # ~700 tokens; chats ~290
    cfg = _cfg(
        tmp_path, "val", dataset=rows, validation_split=0.2, max_seq_len=320, eval_every=2, seed=1
    )
    job = engine.train(cfg)
    result = job.result(120)
    assert result.eval_loss is not None and result.eval_loss > 0
    assert result.train_rows == len(rows) - 1  # one held out
    evals = [e for e in job.events() if e.kind == "eval"]
    # max_steps=4 is a multiple of eval_every=2: step 4 is evaluated once, not again at the end
    # (a second forward over the validation rows and a duplicated EVAL event).
    assert [e.step for e in evals] == [2, 4]
    assert result.eval_loss == evals[-1].eval_loss
    dropped = engine.train(
        _cfg(tmp_path, "drop", dataset=rows, max_seq_len=320, overflow="drop")
    ).result(120)
    truncated = engine.train(_cfg(tmp_path, "trunc", dataset=rows, max_seq_len=320)).result(120)
    assert dropped.dropped_rows == 1 and dropped.train_rows == len(ROWS)
    assert truncated.truncated_rows >= 1 and truncated.train_rows == len(rows)


def test_continue_training_an_adapter(engine, tmp_path):
    first = engine.train(_cfg(tmp_path, "cont", max_steps=3)).result(60)
    with pytest.raises(TrainingError, match="continue_training"):
        engine.train(_cfg(tmp_path, "cont"))
    # Saved back over its own folder: an explicit overwrite, not a silent one.
    with pytest.raises(ConfigError, match=r"/cont', which already holds a saved adapter"):
        engine.train(_cfg(tmp_path, "cont", max_steps=3, continue_training=True))
    more = engine.train(
        _cfg(tmp_path, "cont", max_steps=3, continue_training=True, overwrite=True)
    ).result(60)
    assert more.final_loss < first.final_loss
    # A continued job that cannot start keeps the adapter it was to continue.
    not_a_checkpoint = tmp_path / "elsewhere"
    not_a_checkpoint.mkdir()
    with pytest.raises(TrainingError, match="is not a training checkpoint"):
        engine.train(
            _cfg(tmp_path, "cont", continue_training=True, resume_from=str(not_a_checkpoint))
        )
    assert "cont" in engine.adapters
    assert engine.generate(Request(prompt="Hi", adapters=["cont"], max_new_tokens=2)).ok
    with pytest.raises(TrainingError, match="load it"):
        engine.train(_cfg(tmp_path, "ghost", continue_training=True))


def test_async_events_and_result(engine, tmp_path):
    async def main():
        job = engine.train(_cfg(tmp_path, "aio", max_steps=2))
        kinds = [e.kind async for e in job.aevents()]
        return kinds, await job.aresult()

    kinds, result = asyncio.run(main())
    assert kinds == ["queued", "started", "step", "step", "done"] and result.steps == 2


def test_cancelling_an_awaiter_never_cancels_the_job(engine, tmp_path):
    """Regression: a cancelled ``await job.aresult()`` cancelled the job's own result future."""
    job = engine.train(_cfg(tmp_path, "awaited", max_steps=100_000))

    async def main():
        waiters = [asyncio.ensure_future(job.aresult()) for _ in range(2)]
        stream = job.aevents()
        first = await asyncio.wait_for(anext(stream), 60)
        waiters[0].cancel()  # one awaiter gives up; the other and the job must not notice
        reader = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0)
        reader.cancel()  # same for an event reader
        await asyncio.gather(waiters[0], reader, return_exceptions=True)
        assert not job.done()  # still training
        job.cancel()
        return first, await asyncio.wait_for(waiters[1], 60)

    first, result = asyncio.run(main())
    assert first.kind == "queued"
    assert result.cancelled and job.result(timeout=60) is result
    kinds = [e.kind for e in job.events(timeout=60)]
    assert kinds[-1] == "done"


def test_gradient_checkpointing_and_precision_options(engine, tmp_path):
    plain = engine.train(_cfg(tmp_path, "gc0", max_steps=2)).result(60)
    ckpt = engine.train(_cfg(tmp_path, "gc1", max_steps=2, gradient_checkpointing=True)).result(60)
    assert ckpt.final_loss == pytest.approx(plain.final_loss, rel=1e-4)
    assert not engine.model.get_base_model().is_gradient_checkpointing  # serving as before

    # A job queued behind another shares its model: it switches checkpointing when its turn
    # comes, not at set-up (it turned it on for the job ahead, and off again when cancelled).
    def checkpointing() -> bool:
        return engine.model.get_base_model().is_gradient_checkpointing

    for ahead_gc in (True, False):
        ahead = engine.train(
            _cfg(tmp_path, f"gc-a{ahead_gc}", max_steps=100_000, gradient_checkpointing=ahead_gc)
        )
        assert [e.kind for e in itertools.islice(ahead.events(timeout=60), 3)][-1] == "step"
        queued = engine.train(
            _cfg(tmp_path, f"gc-q{ahead_gc}", max_steps=2, gradient_checkpointing=not ahead_gc)
        )
        assert checkpointing() is ahead_gc
        queued.cancel()
        assert queued.result(timeout=0).cancelled and checkpointing() is ahead_gc
        ahead.cancel()
        assert ahead.result(60).cancelled and not checkpointing()
    bf16 = engine.train(_cfg(tmp_path, "bf", max_steps=2, precision="bfloat16")).result(60)
    assert bf16.final_loss == pytest.approx(plain.final_loss, rel=0.05)


def test_closing_the_engine_fails_a_running_job(tiny_model_path, tmp_path):
    eng = Engine.load(str(tiny_model_path), device="cpu")
    job = eng.train(_cfg(tmp_path, "closing", max_steps=100_000))
    next(iter(job.events(timeout=60)))
    eng.close()
    with pytest.raises(Exception) as info:
        job.result(timeout=60)
    assert isinstance(info.value, (TrainingError, EngineClosedError))


def test_a_job_ended_by_a_close_names_its_last_checkpoint_to_resume(tiny_model_path, tmp_path):
    """The error said only "closed"; with checkpoints saved it now says where to go on from."""
    eng = Engine.load(str(tiny_model_path), device="cpu")
    cfg = _cfg(tmp_path, "closing", max_steps=100_000, checkpoint_every=1, learning_rate=1e-3)
    job = eng.train(cfg)
    next(e for e in job.events(timeout=60) if e.kind == "checkpoint")
    eng.close()
    with pytest.raises(EngineClosedError, match=r"checkpoint, '.*step-\d+', is kept: .*resume"):
        job.result(timeout=60)
    with Engine.load(str(tiny_model_path), device="cpu") as again:
        resumed = again.train(attrs.evolve(cfg, resume_from="latest")).events(timeout=60)
        assert next(resumed).step > 1  # went on from the checkpoint, not from step 0


@pytest.mark.parametrize("family", ["chatml", "llama3", "mistral", "granite"])
def test_tool_call_chats_train_on_every_family(tiny_model_factory, tmp_path, family):
    """Chats with tool calls and results render as the engine serves them, per family."""
    from tests.engine.test_training_data import CHAT

    with Engine.load(str(tiny_model_factory(family)), device="cpu") as eng:
        job = eng.train(_cfg(tmp_path, "tools", dataset=[CHAT], max_steps=1, batch_size=1))
        assert job.result(60).steps == 1
        rendered = job._train[0]
        learned = eng.tokenizer.decode(
            [t for t, m in zip(rendered.ids, rendered.mask, strict=True) if m]
        )
        whole = eng.tokenizer.decode(list(rendered.ids))
    assert "calc" in learned and "It is 4." in learned and "You are welcome." in learned
    assert "What is 2+2?" not in learned and "thanks" not in learned
    assert "What is 2+2?" in whole and "Evaluate arithmetic." in whole


def test_adapter_work_between_steps_does_not_stall_training(engine, tmp_path):
    """Loading and combining adapters while a job runs leaves its parameters trainable."""
    engine.train(_cfg(tmp_path, "other", max_steps=1)).result(60)
    job = engine.train(_cfg(tmp_path, "busy", max_steps=8))
    next(iter(job.events(timeout=60)))
    engine.adapters.load(tmp_path / "other", name="other2")
    engine.generate(Request(prompt="Hi", adapters=["other", "other2"], max_new_tokens=2))
    losses = [e.loss for e in job.events() if e.kind == "step"]
    assert job.result(60).steps == 8
    assert losses[-1] < losses[0]


def _real_templates() -> list:
    import importlib.util
    import pathlib

    from tests._shared import SHARED_TEMPLATES

    stems = ("deepseek_v3", "deepseek_v31", "hermes")
    out = [SHARED_TEMPLATES / f"{stem}.jinja" for stem in stems]
    spec = importlib.util.find_spec("trl")
    if spec is not None and spec.origin:
        # DeepSeek's own V3 template: concatenates the arguments, so it needs JSON text.
        out.append(pathlib.Path(spec.origin).parent / "chat_templates" / "deepseekv3.jinja")
    return [pytest.param(p, id=p.stem) for p in out]


@pytest.mark.parametrize("template", _real_templates())
def test_training_renders_tool_chats_exactly_as_serving(tmp_path, template):
    """Training and serving adapt a chat through ONE function, with the chat template."""
    from mp13_engine._training._data import to_example
    from mp13_engine._training._render import _render, assistant_spans
    from mp13_engine.testing import build_tiny_model
    from tests.engine.test_training_data import CHAT

    path = build_tiny_model(tmp_path / "m")
    (path / "chat_template.jinja").write_text(template.read_text())
    messages, tools = CHAT["messages"], CHAT["tools"]
    with Engine.load(str(path), device="cpu") as eng:
        assert eng.tool_format is not None
        prepare, tok = eng.adapters.training_host().prepare, eng.tokenizer
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            served = eng.format_prompt(Request(messages=messages[:i], tools=tools))
            trained = _render(tok, messages[:i], tools, prepare, True)
            assert trained == served
        full, _ = assistant_spans(tok, to_example("row", CHAT), prepare)
    assert '{"x": "2+2"}' in full  # the call's arguments, written as JSON by every template


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "grad-checkpointing"])
def test_a_job_that_fails_mid_run_leaves_the_engine_as_it_was(
    engine, tmp_path, monkeypatch, checkpointing
):
    from mp13_engine._training._trainer import Trainer

    question = QA[0][0]
    before = _ask(engine, question, [])
    real = Trainer.micro_step
    calls = []

    def failing(self, model):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("simulated failure in a training step")
        return real(self, model)

    monkeypatch.setattr(Trainer, "micro_step", failing)
    name = f"broken-{checkpointing}"
    job = engine.train(_cfg(tmp_path, name, gradient_checkpointing=checkpointing))
    with pytest.raises(TrainingError, match="simulated failure") as info:
        job.result(timeout=120)
    assert "keeps serving" in str(info.value)
    monkeypatch.undo()

    assert name not in engine.adapters
    model = engine.model
    assert name not in getattr(model, "peft_config", {})
    assert not model.training
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    assert not base.is_gradient_checkpointing
    assert _ask(engine, question, []) == before
    # and a new job on the same name trains normally
    assert engine.train(_cfg(tmp_path, name, max_steps=2)).result(timeout=120).steps == 2
    engine.adapters.unload(name)


def test_a_combination_is_rebuilt_after_its_member_is_trained_further(
    engine, tmp_path, monkeypatch
):
    """Training a member in place (continue_training) left a combination built before the job
    serving the member's old weights, silently, when the job failed after changing them (done
    and cancelled jobs install the adapter, which dropped it). Each way a job ends, a request
    on the combination now runs on the weights the member has."""
    from mp13_engine._training._trainer import Trainer

    def combo(names: list[str]) -> str:
        return engine.generate(Request(prompt=QA[1][0], adapters=names, max_new_tokens=8)).raw_text

    for name in ("ca", "cb"):
        engine.train(_cfg(tmp_path, name, max_steps=2)).result(timeout=120)
    further = {"continue_training": True, "learning_rate": 5e-2, "max_steps": 6}
    real, calls = Trainer.micro_step, []

    def failing(self, model):
        calls.append(1)
        if len(calls) == 4:
            raise RuntimeError("simulated failure after three steps")
        return real(self, model)

    for ending in ("done", "failed"):
        stale = combo(["ca", "cb"])  # built (and cached) from ca's weights before the job
        job_dir = str(tmp_path / f"ca-{ending}")
        if ending == "failed":
            monkeypatch.setattr(Trainer, "micro_step", failing)
            with pytest.raises(TrainingError, match="simulated failure"):
                engine.train(_cfg(tmp_path, "ca", output_dir=job_dir, **further)).result(120)
            monkeypatch.undo()
        else:
            engine.train(_cfg(tmp_path, "ca", output_dir=job_dir, **further)).result(120)
        # ca's weights as they are now, loaded under another name: a combination of it is
        # built fresh, from exactly the weights ca has.
        now = engine.adapters.save("ca", tmp_path / f"ca-now-{ending}", overwrite=True)
        engine.adapters.load(now, name=f"ca_now_{ending}")
        expected = combo([f"ca_now_{ending}", "cb"])
        assert combo(["ca", "cb"]) == expected != stale
        engine.adapters.unload(f"ca_now_{ending}")
    engine.adapters.unload("ca")
    engine.adapters.unload("cb")


def test_epochs_grad_accum_and_resume_latest(engine, tmp_path):
    """No max_steps: epochs over the rows set the length; "latest" resumes the newest checkpoint."""
    out = tmp_path / "shared-out"
    with pytest.raises(TrainingError, match=r'resume_from="latest" but .* has no checkpoints'):
        engine.train(
            _cfg(tmp_path, "early", max_steps=None, output_dir=str(out), resume_from="latest")
        )
    assert "early" not in engine.adapters
    # 4 rows, 2 a micro-batch, 2 micro-batches a step: one step an epoch.
    first = engine.train(
        _cfg(
            tmp_path,
            "ep1",
            max_steps=None,
            epochs=2,
            batch_size=2,
            grad_accum=2,
            checkpoint_every=1,
            target_modules="q_proj",
            output_dir=str(out),
        )
    )
    assert first.adapter == "ep1" and first.total_steps == 2
    assert [e.step for e in first.events(timeout=120) if e.kind == "step"] == [1, 2]
    assert first.result(60).steps == 2
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-1", "step-2"]
    more = engine.train(
        _cfg(
            tmp_path,
            "ep2",
            max_steps=None,
            epochs=3,
            batch_size=2,
            grad_accum=2,
            target_modules="q_proj",
            output_dir=str(out),
            resume_from="latest",
        )
    )
    assert more.total_steps == 3
    assert [e.step for e in more.events(timeout=120) if e.kind == "step"] == [3]
    assert more.result(60).steps == 3
    assert engine.adapters.get("ep2").targets == ("q_proj",)
    # A new run into the same output_dir: "latest" is its checkpoint (the most recently saved),
    # not the earlier run's higher step-2; folders that are not step-<n> checkpoints are skipped.
    one = {"batch_size": 2, "grad_accum": 2, "target_modules": "q_proj", "output_dir": str(out)}
    engine.train(
        _cfg(tmp_path, "ep3", max_steps=1, checkpoint_every=1, overwrite=True, **one)
    ).result(60)
    (out / "checkpoints" / "step-2-copy").mkdir()
    (out / "checkpoints" / "step-9").mkdir()  # no trainer_state.pt
    resumed = engine.train(_cfg(tmp_path, "ep4", max_steps=3, resume_from="latest", **one))
    assert [e.step for e in resumed.events(timeout=120) if e.kind == "step"] == [2, 3]


def test_a_new_job_never_overwrites_another_runs_adapter_or_checkpoints(engine, tmp_path):
    """A fresh job into an output_dir holding a saved adapter or checkpoints silently wrote over
    them (that run's work was lost); it is refused before any step, with the ways on."""
    out = tmp_path / "kept"
    first = engine.train(_cfg(tmp_path, "k1", max_steps=2, checkpoint_every=1, output_dir=str(out)))
    assert first.result(60).path == str(out)
    saved = (out / "adapter_model.safetensors").read_bytes()
    advice = (
        rf"saved to '{out}', which already holds a saved adapter and checkpoints of another run; "
        r'.*resume_from="latest".*TrainingConfig\.output_dir.*overwrite=True'
    )
    for cfg in (
        _cfg(tmp_path, "k2", output_dir=str(out)),
        _cfg(tmp_path, "k1", continue_training=True, output_dir=str(out)),
    ):
        with pytest.raises(ConfigError, match=advice):
            engine.train(cfg)
    shutil.rmtree(out / "checkpoints")
    with pytest.raises(ConfigError, match=r"already holds a saved adapter of another run"):
        engine.train(_cfg(tmp_path, "k2", output_dir=str(out)))
    assert "k2" not in engine.adapters
    assert (out / "adapter_model.safetensors").read_bytes() == saved  # nothing was touched
    # Checkpoints alone (a run that failed or was closed before saving) are kept as well.
    (out / "checkpoints" / "step-1").mkdir(parents=True)
    (out / "adapter_config.json").unlink()
    with pytest.raises(ConfigError, match=r"already holds checkpoints of another run"):
        engine.train(_cfg(tmp_path, "k2", output_dir=str(out)))
    # An empty folder, or one with unrelated files, is not another run's work.
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    (tmp_path / "empty" / "notes.txt").write_text("mine")
    assert engine.train(_cfg(tmp_path, "k3", output_dir=str(tmp_path / "empty"))).result(60).steps
    # The explicit opt-in replaces the saved adapter.
    (out / "adapter_config.json").write_text("{}")
    replaced = engine.train(_cfg(tmp_path, "k4", output_dir=str(out), overwrite=True)).result(60)
    assert replaced.path == str(out) and (out / "adapter_model.safetensors").read_bytes() != saved


def test_train_refuses_what_is_not_a_training_config(engine):
    with pytest.raises(ConfigError, match=r"engine\.train needs a TrainingConfig, got dict"):
        engine.train({"adapter": "x", "dataset": ROWS})


def test_an_adapter_in_training_is_held_until_its_job_ends(engine, tmp_path):
    """A second job, load, replace, unload or a request on the adapter a job trains is refused
    with what to do; before, a load replaced the job's weights and an unload killed the job."""
    saved = engine.train(_cfg(tmp_path, "held", max_steps=2)).result(60).path
    job = engine.train(_cfg(tmp_path, "growing", max_steps=500))
    further = None
    try:
        with pytest.raises(TrainingError, match="Another training job is training adapter 'gro"):
            engine.train(_cfg(tmp_path, "growing", output_dir=str(tmp_path / "other")))
        with pytest.raises(AdapterError, match="Cannot load adapter 'growing': a training job"):
            engine.adapters.load(saved, name="growing")
        with pytest.raises(AdapterError, match="'growing' is still being trained"):
            engine.adapters.unload("growing")
        busy = engine.generate(Request(prompt="Hi", adapters=["growing"], max_new_tokens=2))
        assert busy.finish_reason is FinishReason.ERROR and "still being trained" in busy.error
        further = engine.train(
            _cfg(tmp_path, "held", continue_training=True, max_steps=500, overwrite=True)
        )
        with pytest.raises(AdapterError, match="Cannot unload adapter 'held': a training job"):
            engine.adapters.unload("held")
        with pytest.raises(AdapterError, match="Cannot load over adapter 'held'"):
            engine.adapters.load(saved, name="held", replace=True)
        assert not job.done()
    finally:
        job.cancel()
        if further is not None:
            further.cancel()
    assert job.result(120).cancelled and further.result(120).cancelled
    # Released when the jobs end: the names are ordinary adapters again.
    engine.adapters.unload("growing")
    engine.adapters.load(saved, name="held", replace=True)
    engine.adapters.unload("held")


def test_resuming_with_another_data_order_is_refused_unless_asked(engine, tmp_path):
    """A checkpoint's step counts micro-batches of its run's data order; another batch size,
    seed or dataset was accepted silently and trained on other rows (some twice, some never)."""
    first = engine.train(_cfg(tmp_path, "do1", max_steps=4, batch_size=2, checkpoint_every=2))
    first.result(120)
    checkpoint = str(tmp_path / "do1" / "checkpoints" / "step-2")
    changes = {
        "batch_size": ({"batch_size": 4}, r"batch_size=2 \(this job: 4\)"),
        "seed": ({"batch_size": 2, "seed": 7}, r"seed=0 \(this job: 7\)"),
        "dataset": ({"batch_size": 2, "dataset": ROWS[:3]}, r"4 training rows \(this job: 3\)"),
        "content": (
            {"batch_size": 2, "dataset": [*ROWS[:3], ROWS[0]]},
            r"other training rows \(the same count",
        ),
    }
    for what, (kw, needle) in changes.items():
        with pytest.raises(TrainingError, match=needle) as caught:
            engine.train(_cfg(tmp_path, "do2", max_steps=4, resume_from=checkpoint, **kw))
        assert "resume_with_changes=True" in str(caught.value), what
        assert "do2" not in engine.adapters
    # Asked for: the checkpoint's weights, optimizer and step go on with this job's settings.
    job = engine.train(
        _cfg(
            tmp_path,
            "do2",
            max_steps=4,
            batch_size=4,
            resume_from=checkpoint,
            resume_with_changes=True,
        )
    )
    assert [e.step for e in job.events(timeout=120) if e.kind == "step"] == [3, 4]
    assert job.result(60).steps == 4


def test_a_checkpoint_that_cannot_be_written_keeps_the_earlier_ones(engine, tmp_path, monkeypatch):
    """A full disk during a checkpoint: the job fails with what to do, the engine serves on, no
    half-written step-<n> folder is left for resume_from="latest" to pick, and the earlier
    checkpoint resumes."""

    real_save, calls = torch.save, []

    def save(obj, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            with open(path, "wb") as f:  # a partly written file, as a full disk leaves it
                f.write(b"PK\x03\x04 half")
            raise OSError(28, "No space left on device")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    out = tmp_path / "full"
    job = engine.train(_cfg(tmp_path, "full", max_steps=4, checkpoint_every=1))
    with pytest.raises(TrainingError, match=r"checkpoint of step 2 .*No space left") as caught:
        job.result(120)
    assert "step-1" in str(caught.value) and "resume_from" in str(caught.value)
    monkeypatch.undo()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-1"]
    assert "full" not in engine.adapters
    served = engine.generate(Request(prompt="Hi", max_new_tokens=2))
    assert served.finish_reason is not FinishReason.ERROR and served.text
    # A folder a process left when it died mid-save is neither picked nor in the way.
    (out / "checkpoints" / ".step-9.partial").mkdir()
    resumed = engine.train(_cfg(tmp_path, "full", max_steps=4, resume_from="latest"))
    assert [e.step for e in resumed.events(timeout=120) if e.kind == "step"] == [2, 3, 4]


def test_engine_train_logs_how_far_tokenizing_is_and_what_max_seq_len_cut(
    engine, tmp_path, caplog, monkeypatch
):
    """engine.train returns only once every row is tokenized (minutes on a large dataset) and
    said nothing meanwhile; rows cut or left out by max_seq_len were told only in the result."""
    from mp13_engine._training import _progress

    monkeypatch.setattr(_progress.RenderProgress, "every_s", 0.0)  # a line for each row
    rows = [*ROWS, {"text": " ".join(str(i) for i in range(200))}]
    with caplog.at_level(logging.INFO, logger="mp13_engine.training"):
        job = engine.train(_cfg(tmp_path, "logged", dataset=rows, max_seq_len=320, max_steps=1))
    job.result(60)
    messages = [r.getMessage() for r in caplog.records if r.name == "mp13_engine.training"]
    assert "training 'logged': tokenized 2 of 5 rows (40%), about" in messages[1]
    (summary,) = [r for r in caplog.records if "rows in" in r.getMessage()]
    assert summary.levelno == logging.WARNING
    assert "tokenized 5 rows in" in summary.getMessage()
    assert "1 cut to max_seq_len, 0 left out" in summary.getMessage()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mp13_engine.training"):
        engine.train(_cfg(tmp_path, "quiet", max_steps=1)).result(60)
    (summary,) = [r for r in caplog.records if "rows in" in r.getMessage()]
    assert summary.levelno == logging.INFO and "0 cut to max_seq_len" in summary.getMessage()


def test_an_eval_every_evaluation_shares_the_worker_with_requests(engine, tmp_path, monkeypatch):
    """eval_every evaluated the whole validation set in one worker call: training and every
    request waited for all of it (11 s for 3,000 rows on a tiny model; a 3-token request
    took 11.5 s). It now runs one eval_batch_size batch per call, the loss unchanged."""
    from mp13_engine._training._trainer import Trainer

    calls: list[int] = []
    served: list = []  # the request sent at the first batch, and how many batches ran by its end
    queued = threading.Event()
    real = Trainer.eval_sum

    def send() -> None:
        future = engine.submit(Request(prompt="Hi", max_new_tokens=2))
        future.add_done_callback(lambda f: served.append((f.result(), len(calls))))
        queued.set()

    def counting(self, model, rows):
        if not calls:  # on the worker: queue a request from another thread, then go on
            threading.Thread(target=send).start()
            assert queued.wait(30)
        calls.append(len(rows))
        return real(self, model, rows)

    monkeypatch.setattr(Trainer, "eval_sum", counting)
    val = ROWS * 25
    kw = {"validation": val, "eval_batch_size": 1, "max_steps": 1}
    job = engine.train(_cfg(tmp_path, "evals", eval_every=1, checkpoint_every=1, **kw))
    events = job.events(timeout=120)
    assert next(e for e in events if e.kind == "step").step == 1
    # EVAL, then the step's checkpoint, as before; the final evaluation reuses the loss.
    assert [e.kind for e in events] == ["eval", "checkpoint", "done"]
    result = job.result(60)
    assert calls == [1] * len(val)
    ((response, batches_by_then),) = served
    assert response.finish_reason is not FinishReason.ERROR
    assert batches_by_then < len(val) // 2  # served between batches, not after all of them
    at_end = engine.train(_cfg(tmp_path, "evals2", **kw)).result(60)  # one call at the end
    assert result.eval_loss == pytest.approx(at_end.eval_loss, rel=1e-6)


def test_resuming_a_cancelled_job_whose_adapter_is_loaded_says_how(engine, tmp_path):
    """A cancelled job installs what it trained, so the name is loaded when the user resumes
    its checkpoint: the advice is the resume (unload, or resume into it), not another name."""
    straight = engine.train(_cfg(tmp_path, "rc0", max_steps=30, checkpoint_every=2)).result(120)
    job = engine.train(_cfg(tmp_path, "rc", max_steps=30, checkpoint_every=2))
    next(e for e in job.events(timeout=60) if e.kind == "checkpoint")
    job.cancel()
    assert job.result(120).cancelled and "rc" in engine.adapters
    last = [e.path for e in job.events(timeout=60) if e.kind == "checkpoint"][-1]
    resume = _cfg(tmp_path, "rc", max_steps=30, checkpoint_every=2, resume_from="latest")
    with pytest.raises(TrainingError) as caught:
        engine.train(resume)
    message = str(caught.value)
    assert "engine.adapters.unload('rc')" in message and "continue_training=True" in message
    assert "Pick another name" not in message and "rc" in engine.adapters
    # Either way it advises resumes the run where its checkpoint left it.
    into_loaded = engine.train(attrs.evolve(resume, continue_training=True)).result(120)
    assert into_loaded.steps == 30 and not into_loaded.cancelled
    assert into_loaded.final_loss == pytest.approx(straight.final_loss, rel=1e-5)
    engine.adapters.unload("rc")
    unloaded = engine.train(attrs.evolve(resume, resume_from=last)).result(120)
    assert unloaded.steps == 30
    assert unloaded.final_loss == pytest.approx(straight.final_loss, rel=1e-5)
