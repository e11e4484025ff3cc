# SPDX-License-Identifier: Apache-2.0
"""A training job uses only the ``TrainingHost`` it is handed, never the engine's internals.

Issue 14 ("layers that reach in"): training called eight private adapter-manager
methods and read ``engine._state``; ``Engine.train`` was typed ``Any -> Any``.
"""

from __future__ import annotations

import ast
import asyncio
import pathlib
import typing

import attrs
import pytest

from mp13_engine import (
    AdapterSource,
    Engine,
    Request,
    TrainingConfig,
    TrainingError,
    TrainingEventKind,
    TrainingJob,
)
from mp13_engine._training._host import TrainingHost
from mp13_engine._training._job import start_training

TRAINING = pathlib.Path(__file__).parents[2] / "mp13_engine" / "_training"
ROWS = [{"prompt": "Capital of Zorbia?", "completion": " Flumptown."}] * 4


@pytest.fixture(scope="module")
def engine(tiny_model_path, tmp_path_factory):
    adapters = tmp_path_factory.mktemp("host-adapters")
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapters)) as eng:
        yield eng


def _cfg(name: str, **kw) -> TrainingConfig:
    return TrainingConfig(
        **{"adapter": name, "dataset": ROWS, "max_steps": 2, "batch_size": 2, **kw}
    )


def test_engine_train_is_typed():
    hints = typing.get_type_hints(Engine.train)
    assert hints == {"config": TrainingConfig, "return": TrainingJob}


def _private_reaches(path: pathlib.Path) -> list[str]:
    """``obj._name`` uses in ``path``, except on ``self``/``cls`` and of its own functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    return [
        f"{path.name}:{node.lineno} .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        and node.attr not in defined
    ]


def test_training_reaches_no_private_state_of_other_modules():
    found = [reach for path in sorted(TRAINING.glob("*.py")) for reach in _private_reaches(path)]
    assert found == []


def _recording(host: TrainingHost, calls: list) -> TrainingHost:
    def install(name, directory, metadata):
        calls.append(("install", name, directory, metadata))
        return host.install_adapter(name, directory, metadata)

    def discard(name):
        calls.append(("discard", name))
        host.discard_adapter(name)

    return attrs.evolve(host, install_adapter=install, discard_adapter=discard)


def test_a_job_installs_its_adapter_through_the_host(engine):
    calls: list = []
    host = engine.adapters.training_host()
    assert host.tokenizer is engine.tokenizer
    job = start_training(_recording(host, calls), _cfg("hosted"))
    result = job.result(timeout=120)
    [(what, name, directory, metadata)] = calls
    assert (what, name) == ("install", "hosted")
    assert directory == host.adapters_dir / "hosted" == pathlib.Path(result.path)
    assert metadata["training"]["steps"] == 2
    info = engine.adapters.get("hosted")
    assert info.source is AdapterSource.TRAINED and info.path == result.path
    assert engine.generate(Request(prompt="Hi", adapters=["hosted"], max_new_tokens=2)).ok


def test_a_failing_job_discards_its_adapter_through_the_host(engine, monkeypatch):
    from mp13_engine._training._trainer import Trainer

    def failing(self, model):
        raise RuntimeError("simulated failure in a training step")

    calls: list = []
    monkeypatch.setattr(Trainer, "micro_step", failing)
    job = start_training(_recording(engine.adapters.training_host(), calls), _cfg("doomed"))
    with pytest.raises(TrainingError, match="simulated failure"):
        job.result(timeout=120)
    assert calls == [("discard", "doomed")]
    assert "doomed" not in engine.adapters
    assert "doomed" not in getattr(engine.model, "peft_config", {})
    # The failed job released its claim on the name: a new job may train it.
    monkeypatch.undo()
    assert engine.train(_cfg("doomed")).result(timeout=120).steps == 2


def test_event_kinds_are_an_enum_that_still_compares_as_text(engine):
    job = engine.train(_cfg("kinds", eval_every=1, validation=ROWS[:2]))
    kinds = [event.kind for event in job.events(timeout=120)]
    assert all(isinstance(k, TrainingEventKind) for k in kinds)
    assert kinds == [
        TrainingEventKind.QUEUED,
        TrainingEventKind.STARTED,
        TrainingEventKind.STEP,
        TrainingEventKind.EVAL,
        TrainingEventKind.STEP,
        TrainingEventKind.EVAL,  # the last step's: also the final evaluation, not run twice
        TrainingEventKind.DONE,
    ]
    assert kinds[2] == "step" and kinds[-1] == "done"
    assert f"{kinds[2]}" == str(kinds[2]) == "step"  # as a REPL or log line shows it
    assert str(AdapterSource.TRAINED) == f"{AdapterSource.TRAINED}" == "trained"


def test_async_waiting_uses_no_thread(engine, monkeypatch):
    """aevents/aresult are woken by the worker; they never park a thread that polls."""

    def no_threads(*args, **kwargs):
        raise AssertionError("aevents/aresult must not wait in a thread")

    monkeypatch.setattr(asyncio, "to_thread", no_threads)

    async def main():
        job = engine.train(_cfg("awaited-events", max_steps=3))
        kinds = [event.kind async for event in job.aevents()]
        return kinds, await job.aresult()

    kinds, result = asyncio.run(main())
    assert kinds == ["queued", "started", *["step"] * 3, "done"] and result.steps == 3


def test_a_failed_save_at_the_end_says_the_trained_adapter_is_kept(engine):
    """Saving fails after the last step (a full disk, say): the error says the adapter is
    loaded and how to save it, not just the OSError and "start a new job"."""
    host = engine.adapters.training_host()

    def install(name, directory, metadata):
        host.install_adapter(name, directory, metadata)  # registered, then the disk fills up
        raise OSError(28, "No space left on device")

    job = start_training(attrs.evolve(host, install_adapter=install), _cfg("unsaved"))
    with pytest.raises(TrainingError, match=r"took 2 steps, but saving it to .* failed: .*space"):
        job.result(timeout=120)
    with pytest.raises(TrainingError, match=r"engine\.adapters\.save\('unsaved', path\)"):
        job.result()
    assert engine.generate(Request(prompt="Hi", adapters=["unsaved"], max_new_tokens=2)).ok
    engine.adapters.unload("unsaved")  # the claim was released with the failure
