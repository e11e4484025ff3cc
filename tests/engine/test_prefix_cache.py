# SPDX-License-Identifier: Apache-2.0
"""The prefix cache: longest whole-block prefix, keyed by owner, LRU within a byte budget.

Unit tests on ``PrefixCache`` with small tensors, then through the engine: a
repeated prompt and a later turn reuse what was computed (the same text, fewer
tokens computed), the reply's own tokens are reused by the next turn, the
adapter is part of the key, and the counters in ``engine.metrics()``.
"""

from __future__ import annotations

import random

import torch

from mp13_engine import Engine, Request
from mp13_engine._changes import EVERY_ADAPTER, EVERYTHING
from mp13_engine._prefix_cache import PrefixCache
from tests.engine._loop_harness import StepHarness

HEADS, DIM, LAYERS = 2, 3, 2
BLOCK = 4


def _layers(ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fake per-layer keys and values whose entries encode (layer, token id)."""
    t = torch.tensor(ids, dtype=torch.float32)
    out = []
    for layer in range(LAYERS):
        k = (t + 1000 * layer).view(1, -1, 1).expand(HEADS, -1, DIM).clone()
        out.append((k, -k))
    return out


def _hit_layers(hit) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A hit's blocks joined per layer: keys and values ``(heads, tokens, dim)``."""
    joined = [torch.cat(blocks, dim=2) for blocks in hit.blocks]
    return [(both[0], both[1]) for both in joined]


def _block_bytes() -> int:
    return LAYERS * 2 * HEADS * BLOCK * DIM * 4


def test_lookup_returns_the_longest_cached_whole_block_prefix():
    cache = PrefixCache(10**6, block=BLOCK)
    ids = list(range(1, 11))  # 2 whole blocks + 2 tokens
    assert cache.insert("base", ids, _layers(ids)) == 2
    hit = cache.lookup("base", [*ids, 99], limit=10)
    assert hit.tokens == 8
    for (k, v), (ek, ev) in zip(_hit_layers(hit), _layers(ids[:8]), strict=True):
        assert torch.equal(k, ek) and torch.equal(v, ev)
    assert cache.lookup("base", [1, 2, 3, 4, 5, 0, 7, 8], limit=8).tokens == 4  # diverges
    assert cache.lookup("base", ids, limit=7).tokens == 4  # at most `limit` tokens
    assert cache.lookup("base", [0, *ids], limit=10) is None
    assert cache.lookup("adapter-a", ids, limit=10) is None  # another owner
    stats = cache.stats()
    assert (stats.lookups, stats.hits, stats.tokens_saved) == (5, 3, 16)
    assert stats.blocks == 2 and stats.bytes == 2 * _block_bytes()
    assert cache.insert("base", ids, _layers(ids)) == 0  # nothing new


def test_least_recently_used_leaves_go_first_and_the_budget_holds():
    cache = PrefixCache(3 * _block_bytes(), block=BLOCK)
    a, b = list(range(8)), list(range(100, 108))
    cache.insert("o", a, _layers(a))
    cache.insert("o", b, _layers(b))  # 4 blocks > budget: a's deepest block goes
    assert cache.stats().bytes <= cache.budget_bytes and cache.stats().evicted_blocks == 1
    assert cache.lookup("o", a, limit=8).tokens == 4
    assert cache.lookup("o", b, limit=8).tokens == 8
    c = list(range(200, 204))
    cache.insert("o", c, _layers(c))  # a's first block is now the oldest leaf
    assert cache.lookup("o", a, limit=8) is None
    assert cache.lookup("o", b, limit=8).tokens == 8
    assert cache.stats().blocks == 3


def test_a_prompt_longer_than_the_budget_keeps_its_beginning():
    cache = PrefixCache(2 * _block_bytes(), block=BLOCK)
    ids = list(range(20))
    cache.insert("o", ids, _layers(ids))
    assert cache.lookup("o", ids, limit=20).tokens == 8
    assert cache.stats().bytes == 2 * _block_bytes()


def test_random_use_keeps_every_parent_and_the_budget():
    rng = random.Random(0)
    cache = PrefixCache(25 * _block_bytes(), block=BLOCK)
    prefixes = [[rng.randrange(50) for _ in range(rng.randrange(4, 40))] for _ in range(30)]
    for _ in range(400):
        ids = rng.choice(prefixes) + [rng.randrange(50) for _ in range(rng.randrange(0, 12))]
        owner = rng.choice(["base", "a"])
        if rng.random() < 0.5:
            cache.insert(owner, ids, _layers(ids))
        else:
            hit = cache.lookup(owner, ids, limit=len(ids))
            if hit is not None:
                assert torch.equal(_hit_layers(hit)[0][0], _layers(ids[: hit.tokens])[0][0])
        assert cache.stats().bytes <= cache.budget_bytes
        for node in cache._lru.values():
            assert node.parent.parent is None or id(node.parent) in cache._lru
            assert node.parent.children[node.key] is node


def test_a_thousand_distinct_conversations_stay_within_the_budget():
    cache = PrefixCache(100 * _block_bytes(), block=BLOCK)
    rng = random.Random(1)
    for conversation in range(1000):
        ids = [conversation * 1000 + i for i in range(rng.randrange(8, 24))]
        for _turn in range(3):  # each turn's prompt extends the previous one
            ids = ids + [rng.randrange(10**6) for _ in range(rng.randrange(4, 12))]
            cache.lookup("base", ids, limit=len(ids) - 1)
            cache.insert("base", ids, _layers(ids))
            assert cache.stats().bytes <= cache.budget_bytes
    stats = cache.stats()
    assert stats.blocks <= 100 and stats.evicted_blocks > 0
    assert stats.hits > 0  # later turns of a conversation found their earlier turns
    # the most recent conversation is still there, the first one is long gone
    assert cache.lookup("base", ids, limit=len(ids)).tokens >= 8
    assert cache.lookup("base", list(range(8)), limit=8) is None


def test_dropping_owners_frees_their_blocks():
    cache = PrefixCache(10**6, block=BLOCK)
    for owner in ("base", "a", "b"):
        cache.insert(owner, list(range(8)), _layers(list(range(8))))
    cache.drop(lambda owner: owner != "base")
    assert cache.stats().blocks == 2 and cache.stats().bytes == 2 * _block_bytes()
    assert cache.lookup("a", list(range(8)), limit=8) is None
    assert cache.lookup("base", list(range(8)), limit=8).tokens == 8
    cache.clear()
    assert cache.stats().blocks == 0 and cache.stats().bytes == 0 and not cache._roots


def test_a_zero_budget_turns_it_off():
    cache = PrefixCache(0)
    assert cache.insert("o", list(range(64)), _layers(list(range(64)))) == 0
    assert cache.lookup("o", list(range(64)), limit=64) is None
    assert cache.stats().lookups == 0


# ----- through the engine

SYSTEM = "You are a careful assistant. " * 6


def _chat(*turns: str) -> list[dict]:
    msgs = [{"role": "system", "content": SYSTEM}]
    for i, text in enumerate(turns):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return msgs


def test_a_repeated_prompt_and_the_next_turn_reuse_the_cache(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", prefix_cache_mb=0) as plain:
        first_plain = plain.generate(Request(messages=_chat("Hi"), max_new_tokens=8))
        second_plain = plain.generate(
            Request(messages=_chat("Hi", first_plain.text, "And then?"), max_new_tokens=8)
        )
    with Engine.load(str(tiny_model_path), device="cpu") as engine:
        first = engine.generate(Request(messages=_chat("Hi"), max_new_tokens=8))
        again = engine.generate(Request(messages=_chat("Hi"), max_new_tokens=8))
        second = engine.generate(
            Request(messages=_chat("Hi", first.text, "And then?"), max_new_tokens=8)
        )
        stats = engine.metrics().prefix_cache
    assert first.raw_text == again.raw_text == first_plain.raw_text
    assert second.raw_text == second_plain.raw_text
    assert first.metrics.cached_tokens == 0
    prompt = first.metrics.prompt_tokens
    assert prompt - 32 < again.metrics.cached_tokens < prompt  # all whole blocks but the last
    assert second.metrics.cached_tokens >= prompt // 32 * 32 - 32
    assert stats.hits == 2 and stats.lookups == 3
    assert stats.tokens_saved == again.metrics.cached_tokens + second.metrics.cached_tokens
    assert 0 < stats.bytes <= stats.budget_bytes == 256 * 2**20
    assert stats.hit_rate == 2 / 3
    assert 0 < stats.token_hit_rate == stats.tokens_saved / stats.tokens_looked_up < 1


def test_a_budget_smaller_than_one_block_stores_nothing(tiny_model_path):
    with Engine.load(str(tiny_model_path), device="cpu", prefix_cache_mb=0.001) as engine:
        first = engine.generate(Request(messages=_chat("Hi"), max_new_tokens=8))
        again = engine.generate(Request(messages=_chat("Hi"), max_new_tokens=8))
        stats = engine.metrics().prefix_cache
    assert again.raw_text == first.raw_text and again.metrics.cached_tokens == 0
    assert stats.blocks == stats.bytes == stats.hits == 0 and stats.lookups == 2
    assert stats.hit_rate == stats.token_hit_rate == 0.0


def test_the_reply_itself_is_reused_by_the_next_turn(tiny_model_path):
    harness = StepHarness(Engine.load(str(tiny_model_path), device="cpu"), prefix_cache_mb=16)
    first = harness.submit(Request(prompt="Tell me a long story", max_new_tokens=80))
    first_ids = list(first.prompt_ids)
    harness.run([first])
    reply = list(first.tokens)
    assert len(reply) > 40
    # the next prompt: this prompt, the reply, then new text (what a chat template renders)
    follow = harness.prepare(Request(prompt="x", max_new_tokens=4))
    follow.prompt_ids = first_ids + reply + first_ids[:5]
    harness.waiting.append(follow)
    harness.run([follow])
    fed = len(first_ids) + len(reply) - 1  # the last reply token was never fed to the model
    assert follow.response.metrics.cached_tokens == fed // 32 * 32
    assert follow.response.metrics.cached_tokens > len(first_ids)


def test_the_adapter_is_part_of_the_key(tiny_model_path, adapter_dir):
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir)) as engine:
        engine.adapters.load("a")
        base1 = engine.generate(Request(messages=_chat("Hi"), max_new_tokens=6))
        on_a = engine.generate(Request(messages=_chat("Hi"), max_new_tokens=6, adapters=["a"]))
        on_a2 = engine.generate(Request(messages=_chat("Hi"), max_new_tokens=6, adapters=["a"]))
        base2 = engine.generate(Request(messages=_chat("Hi"), max_new_tokens=6))
    assert on_a.metrics.cached_tokens == 0  # the base model's KV is not the adapter's
    assert on_a2.metrics.cached_tokens > 0 and on_a2.raw_text == on_a.raw_text
    assert base2.metrics.cached_tokens > 0 and base2.raw_text == base1.raw_text
    assert on_a.raw_text != base1.raw_text


def test_loading_an_adapter_forgets_what_weights_may_have_changed(tiny_model_path, adapter_dir):
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir)) as engine:
        engine.adapters.load("a")
        engine.generate(Request(messages=_chat("Hi"), max_new_tokens=4, adapters=["a"]))
        assert engine.metrics().prefix_cache.blocks > 0
        engine.adapters.unload("a")
        engine.adapters.load("a")  # the same name, maybe other weights
        again = engine.generate(Request(messages=_chat("Hi"), max_new_tokens=4, adapters=["a"]))
    assert again.metrics.cached_tokens == 0


def test_a_prompt_whose_weights_changed_while_it_was_prefilled_is_not_kept(tiny_model_path):
    # Its KV is keyed by the weights' old version, which no later lookup uses: kept, it
    # was memory no request could reuse, counted in metrics().prefix_cache.bytes.
    harness = StepHarness(
        Engine.load(str(tiny_model_path), device="cpu"), chunk_tokens=64, prefix_cache_mb=16
    )
    first = harness.submit(Request(prompt="many words " * 60, max_new_tokens=4))
    harness.step()  # the first of several 64-token chunks
    assert not first.tokens
    harness.loop.weights_changed(EVERYTHING)  # e.g. a call that says nothing, between steps
    harness.run([first])
    assert first.response.ok
    assert harness.prefix.stats().blocks == harness.prefix.stats().bytes == 0
    again = harness.submit(Request(prompt="many words " * 60, max_new_tokens=4))
    harness.run([again])
    assert again.response.metrics.cached_tokens == 0  # the old version's KV is not reused
    kept = harness.prefix.stats()
    assert kept.blocks == len(again.prompt_ids) // 32  # computed under the new version
    third = harness.submit(Request(prompt="many words " * 60, max_new_tokens=4))
    harness.run([third])
    assert third.response.metrics.cached_tokens > 0
    assert third.response.raw_text == again.response.raw_text == first.response.raw_text


def test_replacing_an_adapter_never_reuses_the_old_weights_kv(tiny_model_path, adapter_dir):
    chat = _chat("Hi")
    with Engine.load(str(tiny_model_path), device="cpu", prefix_cache_mb=0) as plain:
        plain.adapters.load(str(adapter_dir / "b"), name="a")
        expected = plain.generate(Request(messages=chat, max_new_tokens=6, adapters=["a"]))
    with Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir)) as engine:
        engine.adapters.load("a")
        old = engine.generate(Request(messages=chat, max_new_tokens=6, adapters=["a"]))
        base = engine.generate(Request(messages=chat, max_new_tokens=6))  # the base model's too
        engine.adapters.load(str(adapter_dir / "b"), name="a", replace=True)
        # Once load() returns, the blocks left are the base model's only (read between steps).
        assert {owner.adapter for owner in engine._prefix._roots} == {"__base__"}
        assert engine.metrics().prefix_cache.blocks > 0
        new = engine.generate(Request(messages=chat, max_new_tokens=6, adapters=["a"]))
        base2 = engine.generate(Request(messages=chat, max_new_tokens=6))
    assert new.metrics.cached_tokens == 0
    assert new.raw_text == expected.raw_text != old.raw_text
    assert base2.metrics.cached_tokens > 0 and base2.raw_text == base.raw_text


def test_a_training_step_drops_the_adapters_blocks_and_keeps_the_base_models(
    tiny_model_path, adapter_dir
):
    engine = Engine.load(str(tiny_model_path), device="cpu", adapters_dir=str(adapter_dir))
    engine.adapters.load("a")
    harness = StepHarness(engine, prefix_cache_mb=16)
    base = harness.solo(Request(messages=_chat("Hi"), max_new_tokens=4))
    on_a = harness.solo(Request(messages=_chat("Hi"), max_new_tokens=4, adapters=["a"]))
    both = harness.prefix.stats().blocks
    harness.loop.weights_changed(EVERY_ADAPTER)  # a job step that says nothing
    assert 0 < harness.prefix.stats().blocks < both
    base2 = harness.solo(Request(messages=_chat("Hi"), max_new_tokens=4))
    on_a2 = harness.solo(Request(messages=_chat("Hi"), max_new_tokens=4, adapters=["a"]))
    assert base2.metrics.cached_tokens > 0 and base2.raw_text == base.raw_text
    assert on_a2.metrics.cached_tokens == 0 and on_a2.raw_text == on_a.raw_text
