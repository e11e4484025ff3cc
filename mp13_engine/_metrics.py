# SPDX-License-Identifier: Apache-2.0
"""Rolling engine metrics over the last N finished requests.

``MetricsRecorder`` is thread-safe: the worker (and cancelling callers)
``record`` finished requests; any thread reads a frozen ``EngineMetrics``
snapshot. Only the last ``window`` requests are kept, so memory is bounded.
"""

from __future__ import annotations

import collections
import threading

import attrs

from mp13_engine._types import FinishReason, Response


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    # nearest-rank on a 0..1 scale: p50 of [a, b] is a, p95 of 20 values is the 19th
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[k]


@attrs.frozen(kw_only=True)
class EngineMetrics:
    """Aggregates over the last ``window`` finished requests, plus the live queue.

    ``throughput_tokens_per_s``: completion tokens of those requests divided by
    the wall time from the first one's submission to the last one's end.
    Latency is submission → final response; TTFT is submission → first token.
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
    finish_reasons: dict[str, int] = attrs.field(factory=dict, hash=False)
    queue_depth: int = 0
    running: int = 0
    total_requests: int = 0


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

    def record(self, submit_t: float, end_t: float, response: Response) -> None:
        with self._lock:
            self._entries.append(_Entry(submit_t, end_t, response))
            self._total += 1

    def snapshot(self, queue_depth: int, running: int) -> EngineMetrics:
        with self._lock:
            entries = list(self._entries)
            total = self._total
        if not entries:
            return EngineMetrics(
                window=self.window, queue_depth=queue_depth, running=running, total_requests=total
            )
        metrics = [e.response.metrics for e in entries]
        completion = sum(m.completion_tokens for m in metrics)
        span = max(e.end for e in entries) - min(e.start for e in entries)
        latencies = [m.total_s for m in metrics]
        ttfts = [m.ttft_s for m in metrics if m.ttft_s is not None]
        reasons = collections.Counter(e.response.finish_reason.value for e in entries)
        ran = [m.batch_size for m in metrics if m.batch_size]
        return EngineMetrics(
            window=self.window,
            requests=len(entries),
            prompt_tokens=sum(m.prompt_tokens for m in metrics),
            completion_tokens=completion,
            throughput_tokens_per_s=completion / span if span > 0 else 0.0,
            latency_p50_s=_percentile(latencies, 0.5),
            latency_p95_s=_percentile(latencies, 0.95),
            ttft_p50_s=_percentile(ttfts, 0.5),
            ttft_p95_s=_percentile(ttfts, 0.95),
            mean_batch_size=sum(ran) / len(ran) if ran else 0.0,
            finish_reasons={r.value: reasons.get(r.value, 0) for r in FinishReason},
            queue_depth=queue_depth,
            running=running,
            total_requests=total,
        )
