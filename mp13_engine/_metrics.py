# SPDX-License-Identifier: Apache-2.0
"""Rolling engine metrics over the last N requests that ran.

``MetricsRecorder`` is thread-safe: the worker (and cancelling callers)
``record`` finished requests; any thread reads a frozen ``EngineMetrics``
snapshot. Only the last ``window`` requests that ran are kept, so memory is
bounded. A request that ended without running (its ``metrics.batch_size`` is
0: it ended while queued or before its prompt was fully prefilled) is only
counted: its zero tokens and its queue time would distort the latency and
token figures. It is counted by why it ended: ``cancelled_before_start`` when
it was cancelled (by its caller, or by ``close()``), else ``rejected``
(refused as invalid, queue full or unknown adapter, or timed out or failed
before it ran). A caller that cancels work it no longer needs (a warm-up
made stale) has had nothing refused.
"""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Iterable

import attrs

from mp13_engine._types import FinishReason, Response

#: Tokens per prefix-cache block (``_prefix_cache``).
BLOCK_TOKENS = 32


def _percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of ``values``; None when there are none.

    The smallest value with at least ``q`` of the values at or below it, so always one of
    them: p50 of [a, b] is a, of [a, b, c, d] is b; p95 of 20 values is the 19th, of 100
    the 95th; of one value, that value.
    """
    if not values:
        return None
    ordered = sorted(values)
    # The epsilon keeps q * n that float arithmetic puts a hair above a whole number
    # (0.07 * 100 is 7.000000000000001) on that rank.
    rank = math.ceil(q * len(ordered) - 1e-9)
    return ordered[max(0, min(len(ordered) - 1, rank - 1))]


def _reason_counts(ended: Iterable[FinishReason] = ()) -> dict[str, int]:
    """``EngineMetrics.finish_reasons``: how many of ``ended`` ended with each reason, by
    value; every reason is a key (0 when none did, as before any request ran)."""
    counts = collections.Counter(ended)
    return {r.value: counts[r] for r in FinishReason}


@attrs.frozen(kw_only=True)
class PrefixCacheStats:
    """Counters of the prefix cache since the engine started (``engine.metrics().prefix_cache``).

    ``hit_rate``: the share of lookups (one per admitted request) that reused at
    least one block; ``tokens_saved``: prompt tokens taken from the cache
    instead of computed; ``token_hit_rate``: ``tokens_saved`` over the prompt
    tokens looked up; ``evicted_blocks``: blocks dropped to stay within
    ``budget_bytes`` (not those forgotten because adapters or weights changed).
    """

    budget_bytes: int = 0
    bytes: int = 0
    blocks: int = 0
    block_tokens: int = BLOCK_TOKENS
    lookups: int = 0
    hits: int = 0
    tokens_looked_up: int = 0
    tokens_saved: int = 0
    evicted_blocks: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0

    @property
    def token_hit_rate(self) -> float:
        return self.tokens_saved / self.tokens_looked_up if self.tokens_looked_up else 0.0


@attrs.frozen(kw_only=True)
class EngineMetrics:
    """Aggregates over the last ``window`` requests that ran, plus live counters.

    ``window``: ``EngineConfig.metrics_window``; ``requests``: how many requests
    the window holds now (at most ``window``); ``prompt_tokens``,
    ``completion_tokens``: their sums of ``RequestMetrics``' fields;
    ``mean_batch_size``: the mean of their ``RequestMetrics.batch_size``.
    ``throughput_tokens_per_s``: completion tokens of those requests divided by
    the wall time from the first one's submission to the last one's end (time
    the engine sat idle between them included: the rate it delivered, not its
    peak).
    Latency is submission → final response; TTFT is submission → first token
    (requests that produced none are left out). The p50/p95 figures are
    nearest-rank percentiles, each one of the window's values: with one request
    both are its value, with two p50 is the smaller and p95 the larger; None
    while the window is empty.
    ``total_requests``: every request that ended since the engine started;
    ``rejected`` of them were refused or failed without running (queue full,
    invalid, timed out while queued), and ``cancelled_before_start`` were
    cancelled before they ran (see the module docstring).
    ``finish_reasons``: how many of the requests in the window (those that
    ran; the ``rejected`` and ``cancelled_before_start`` ones are not among
    them) ended with each ``FinishReason`` (by its value; every reason is
    a key, 0 while none did, also on an idle engine). ``queue_depth``,
    ``running``: requests waiting and running when the snapshot was taken
    (not part of the window). ``steps``: decode-loop
    steps run; ``slow_steps``: steps (decode, training or worker calls) that
    ran far past their usual time (see
    ``EngineConfig.slow_step_s``); ``prefix_cache``: hits, tokens saved and
    memory of the prefix cache.
    """

    window: int
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    throughput_tokens_per_s: float = 0.0
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    mean_batch_size: float = 0.0
    finish_reasons: dict[str, int] = attrs.field(factory=_reason_counts, hash=False)
    queue_depth: int = 0
    running: int = 0
    total_requests: int = 0
    rejected: int = 0
    cancelled_before_start: int = 0
    steps: int = 0
    slow_steps: int = 0
    prefix_cache: PrefixCacheStats = attrs.field(factory=PrefixCacheStats)


@attrs.frozen
class _Entry:
    start: float
    end: float
    response: Response


class MetricsRecorder:
    def __init__(self, window: int):
        self.window = window
        self._lock = threading.Lock()
        self._entries: collections.deque[_Entry] = collections.deque(maxlen=window)
        self._total = 0
        self._rejected = 0
        self._cancelled = 0  # before they ran

    def record(self, submit_t: float, end_t: float, response: Response) -> None:
        with self._lock:
            self._total += 1
            if response.metrics.batch_size == 0:  # it never ran
                if response.finish_reason is FinishReason.CANCELLED:
                    self._cancelled += 1
                else:
                    self._rejected += 1
            else:
                self._entries.append(_Entry(submit_t, end_t, response))

    def snapshot(
        self,
        queue_depth: int,
        running: int,
        *,
        steps: int = 0,
        slow_steps: int = 0,
        prefix_cache: PrefixCacheStats | None = None,
    ) -> EngineMetrics:
        with self._lock:
            entries = list(self._entries)
            total, rejected, cancelled = self._total, self._rejected, self._cancelled
        live = EngineMetrics(
            window=self.window,
            queue_depth=queue_depth,
            running=running,
            total_requests=total,
            rejected=rejected,
            cancelled_before_start=cancelled,
            steps=steps,
            slow_steps=slow_steps,
            prefix_cache=prefix_cache or PrefixCacheStats(),
        )
        if not entries:
            return live
        metrics = [e.response.metrics for e in entries]  # every one ran: batch_size >= 1
        completion = sum(m.completion_tokens for m in metrics)
        span = max(e.end for e in entries) - min(e.start for e in entries)
        latencies = [m.total_s for m in metrics]
        ttfts = [m.ttft_s for m in metrics if m.ttft_s is not None]
        return attrs.evolve(
            live,
            requests=len(entries),
            prompt_tokens=sum(m.prompt_tokens for m in metrics),
            completion_tokens=completion,
            throughput_tokens_per_s=completion / span if span > 0 else 0.0,
            latency_p50_s=_percentile(latencies, 0.5),
            latency_p95_s=_percentile(latencies, 0.95),
            ttft_p50_s=_percentile(ttfts, 0.5),
            ttft_p95_s=_percentile(ttfts, 0.95),
            mean_batch_size=sum(m.batch_size for m in metrics) / len(metrics),
            finish_reasons=_reason_counts(e.response.finish_reason for e in entries),
        )
