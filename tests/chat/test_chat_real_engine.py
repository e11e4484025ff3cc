# SPDX-License-Identifier: MIT
"""The REPL on a real tiny engine (random weights: behaviour, never text)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory):
    from mp13_engine import Engine
    from mp13_engine.testing import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", family="chatml", seed=0)
    engine = Engine.load(str(path), device="cpu", dtype="float32")
    yield engine
    engine.close()


def test_chat_fork_retry_prompt_and_metrics_on_a_real_engine(make_chat, tiny_engine):
    h = make_chat(tiny_engine, params={"max_new_tokens": 8})
    out = h.run("hello", "/fork", "hello again", "/retry", "/prompt", "/metrics", "/engine")
    replies = [n.turn for n in h.app.cursor.path() if n.turn and n.turn.role.value == "assistant"]
    assert len(replies) == 2
    assert all(r.metrics.completion_tokens <= 8 for r in replies)
    assert len(h.app.cursor.siblings()) == 2  # the retry
    assert "<|im_start|>user" in out  # the exact prompt, chatml
    assert "throughput" in out and "chatml" not in out.split("engine")[0]


def _has_steps(job):
    if job is None:
        return False
    try:
        next(iter(job.events(timeout=0.01)))
    except TimeoutError:
        return False
    return True


@pytest.mark.slow
def test_train_start_watch_interrupt_and_cancel(make_chat, tiny_engine, tmp_path):
    data = tmp_path / "data.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]}
        for i in range(8)
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    h = make_chat(tiny_engine)
    out = h.run(
        f"/train start slowpoke {data} max_steps=100000 batch_size=1 output_dir={tmp_path}/out",
        # interrupt once the job runs: Ctrl+C stops watching, not training
        interrupt_when=lambda: _has_steps(h.app.training_job),
        timeout=60,
    )
    assert "stopped watching" in out
    job = h.app.training_job
    assert job is not None and not job.done()
    out = h.run("/train cancel", timeout=60)
    assert job.done()
    assert job.result().cancelled
    assert out.count("training cancelled") == 1
    # the engine still serves
    out = h.run("/set max_new_tokens 4", "still alive?")
    assert "4 tokens" in out
