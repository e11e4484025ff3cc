# SPDX-License-Identifier: MIT
"""The REPL on a real tiny engine (random weights: behaviour, never text)."""

from __future__ import annotations

import json

import pytest

from tests.chat._output import table_rows

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


def test_metrics_shows_what_engine_metrics_counts(make_chat, tiny_engine):
    """Was: ``/metrics`` left out the requests that never ran and the prefix cache, so
    "requests (window / total)" read 2 / 3 with no reason for the gap."""
    from mp13_engine import Request

    tiny_engine.generate(Request(prompt="never runs", adapters=["no-such-adapter"]))
    h = make_chat(tiny_engine, params={"max_new_tokens": 4})
    out = h.run("a long enough first question " * 12, "/retry", "/metrics")
    m = tiny_engine.metrics()
    rows = table_rows(out)
    assert rows["requests (window / total)"] == [f"{m.requests} / {m.total_requests}"]
    assert rows["rejected (never ran)"] == [str(m.rejected)]
    assert rows["cancelled before running"] == [str(m.cancelled_before_start)]
    assert m.rejected >= 1 and m.prefix_cache.hits >= 1  # the retry reuses the prompt
    cache = m.prefix_cache
    expected = f"{cache.hits} of {cache.lookups} / {cache.tokens_saved}"
    assert rows["prefix cache hits / tokens saved"] == [expected]


def _has_steps(job):
    if job is None:
        return False
    try:
        next(iter(job.events(timeout=0.01)))
    except TimeoutError:
        return False
    return True


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


def test_quit_while_training_runs_says_what_it_loses_and_asks_again(
    make_chat, tiny_engine, tmp_path
):
    # /quit closed the engine, which cancelled a running job and saved nothing, without
    # a word: on SmolLM2 a 500-step job was gone 12 steps in after one /quit.
    data = _dataset(tmp_path / "data.jsonl", rows=8)
    h = make_chat(tiny_engine)
    out = h.run(
        f"/train start quitter {data} max_steps=100000 batch_size=1 output_dir={tmp_path}/out",
        "/quit",  # typed while watching: read after Ctrl+C stops watching
        "/params",
        "/quit",  # the second /quit leaves
        interrupt_when=lambda: _has_steps(h.app.training_job),
        quit=False,
        timeout=60,
    )
    job = h.app.training_job
    assert job is not None and not job.done()
    flat = " ".join(out.split())
    assert (
        "training job quitter is still running, and quitting cancels it and saves nothing; "
        "/train watch waits for it, /train cancel stops it, /quit again (or Ctrl+D) leaves"
    ) in flat
    assert "settings" in flat  # the REPL stayed and ran the next command
    assert flat.count("still running") == 1  # and the second /quit left
    assert not job.done()  # quitting the loop left the job to the app's close
    out = h.run("/train cancel", timeout=60)
    assert job.done() and job.result().cancelled
    # a job that has ended does not hold the next /quit back
    out = h.run("/quit", quit=False, timeout=30)
    assert "still running" not in out
    if "quitter" in tiny_engine.adapters:  # the shared engine serves the next tests
        tiny_engine.adapters.unload("quitter")


def _dataset(path, rows=4):
    lines = [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]}
        for i in range(rows)
    ]
    path.write_text("\n".join(json.dumps(r) for r in lines))
    return path


def test_train_an_adapter_then_list_use_add_and_save_it(make_chat, tiny_engine, tmp_path):
    data = _dataset(tmp_path / "data.jsonl")
    h = make_chat(tiny_engine, params={"max_new_tokens": 2})
    out = " ".join(h.run("/train watch", "/train start fact", "/train cancel").split())
    assert out.count("error: no training job in this run; /train start one") == 2
    assert "error: give the adapter name and the dataset file; usage: /train start NAME" in out
    out = " ".join(h.run(f"/train start fact {data} max_steps").split())
    assert "write options as key=value (e.g. max_steps=50), got 'max_steps'" in out
    assert h.app.training_job is None
    out = " ".join(h.run(f"/train start fact {data} max_steps=2 batch_size=2 lora_r=4").split())
    saved = tmp_path / "adapters" / "fact"
    assert "training done: adapter fact, 2 steps, final loss" in out
    assert f"saved at {saved}; /adapters use fact" in out
    assert (saved / "adapter_config.json").is_file()
    # the finished job: /engine says so, /train cancel has nothing to stop, watch repeats
    out = h.run("/engine", "/train cancel", "/train watch")
    assert table_rows(out)["training"] == ["fact: done"]
    assert "the job has already finished" in out
    assert "training done: adapter fact" in out
    # the trained adapter is loaded: listed, used on a branch, saved elsewhere
    out = h.run("/adapters")
    assert table_rows(out)["fact"][:3] == ["", "4", "trained"]  # used, rank, source
    assert "q_proj" in table_rows(out)["fact"][3]
    assert "this branch uses the engine's default adapters" in out
    out = h.run("/adapters base", "/adapters add fact", "/adapters list", "hello")
    assert "this branch uses fact" in out
    assert table_rows(out)["fact"][0] == "here"
    assert "adapters fact" in out  # the reply's footer names the adapter it ran with
    tiny_engine.adapters.set_default(["fact"])
    try:
        out = h.run("/adapters default", "/adapters list")
    finally:
        tiny_engine.adapters.set_default([])
    assert table_rows(out)["fact"][0] == "here, default"
    copy = tmp_path / "copy"
    out = " ".join(h.run(f"/adapters save fact {copy}").split())
    assert f"saved fact to {copy}" in out
    assert (copy / "adapter_config.json").is_file()
    # another adapter's folder is kept unless the REPL word asks to replace it
    other = tmp_path / "other"
    tiny_engine.adapters.save("fact", other)
    tiny_engine.adapters.load(other, name="twin")
    out = " ".join(h.run(f"/adapters save twin {copy}").split())
    assert "holds another saved adapter, so nothing was written" in out
    assert f"/adapters save twin {copy} overwrite" in out and "overwrite=True" not in out
    out = " ".join(
        h.run(f"/adapters save twin {copy} overwrite", "/adapters save twin x y").split()
    )
    assert f"saved twin to {copy}" in out
    assert "the third word can only be 'overwrite'" in out
    h.run("/adapters unload twin")
    h.run("/adapters unload fact")
    assert "fact" not in tiny_engine.adapters
    # a job that could not save is refused before it trains; chatting goes on
    (tmp_path / "afile").write_text("")
    out = " ".join(
        h.run(f"/train start lost {data} max_steps=1 output_dir={tmp_path}/afile/x").split()
    )
    assert f"error: The adapter would be saved to '{tmp_path}/afile/x'" in out
    assert "training done" not in out and "lost" not in tiny_engine.adapters
    assert "tokens" in h.run("hello")  # the REPL still answers (the reply's footer)


def test_ctrl_c_while_a_job_starts_keeps_the_job(make_chat, tiny_engine, tmp_path, monkeypatch):
    import threading
    import time

    data = _dataset(tmp_path / "data.jsonl", rows=8)
    entered = threading.Event()
    train = tiny_engine.train

    def slow_to_start(config):  # Ctrl+C lands while the job is being set up
        entered.set()
        time.sleep(0.3)
        return train(config)

    monkeypatch.setattr(tiny_engine, "train", slow_to_start)
    h = make_chat(tiny_engine)
    out = h.run(
        f"/train start slow {data} max_steps=100000 batch_size=1 output_dir={tmp_path}/out",
        interrupt_when=entered.is_set,
        timeout=60,
    )
    assert "training started; /train watch, /train cancel" in out
    job = h.app.training_job
    assert job is not None and job.adapter == "slow"
    out = " ".join(h.run(f"/train start second {data}").split())
    assert "error: a job (slow) is running; /train cancel it or wait" in out
    assert h.app.training_job is job
    out = h.run("/train cancel", timeout=60)
    assert job.done() and job.result().cancelled
    assert out.count("training cancelled: adapter slow") == 1
    tiny_engine.adapters.unload("slow")
