# SPDX-License-Identifier: Apache-2.0
"""``ResponseBuilder``: turns a finished request's tokens into its ``Response``.

Called once per request (by the step loop through ``_rowout.RowOutput``, by a
canceller, by the watchdog or by ``close``), from any thread: it seals the
request's tokens, decodes and parses them, and records the request's metrics.
"""

from __future__ import annotations

import time

from mp13_engine._metrics import MetricsRecorder
from mp13_engine._state import EngineState
from mp13_engine._streams import RequestState
from mp13_engine._toolwire import ToolWire
from mp13_engine._types import FinishReason, RequestMetrics, Response


class ResponseBuilder:
    """Builds the final ``Response`` of a request (any thread) and records its metrics."""

    def __init__(self, state: EngineState, metrics: MetricsRecorder, toolwire: ToolWire):
        self._state = state
        self._metrics = metrics
        self._toolwire = toolwire

    def text_of(self, st: RequestState, tokens: list[int]) -> str:
        text = self._state.tokens.decode(tokens)
        stops = [s for s in st.request.stop if s]
        if stops:
            cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
            if cut >= 0:
                text = text[:cut]
        return text

    def finish(
        self, st: RequestState, reason: FinishReason, error: str | None = None
    ) -> Response | None:
        """Resolve ``st`` with its final response; None when it was already resolved."""
        if st.done:
            return None
        now = time.perf_counter()
        tokens = st.seal()  # no pushes after this: response and streams agree
        raw = self.text_of(st, tokens) if tokens else ""
        text, reasoning, calls, parse_errors = raw, "", (), ()
        if raw:
            parsed = self._toolwire.parse(raw, st.request, st.prompt_text)
            if parsed is not None:
                text, reasoning = parsed.content, parsed.reasoning
                calls, parse_errors = parsed.tool_calls, parsed.errors
        start = st.start_t if st.start_t is not None else now
        gen_s = now - start
        n = len(tokens)
        metrics = RequestMetrics(
            prompt_tokens=len(st.prompt_ids or ()),
            completion_tokens=n,
            queue_s=start - st.submit_t,
            ttft_s=(st.first_token_t - st.submit_t) if st.first_token_t is not None else None,
            total_s=now - st.submit_t,
            tokens_per_s=n / gen_s if gen_s > 0 and n else 0.0,
            batch_size=st.batch_size,
            adapters=st.adapter_names,
            cached_tokens=st.cached_tokens,
        )
        response = Response(
            id=st.id,
            text=text,
            raw_text=raw,
            reasoning=reasoning,
            tool_calls=calls,
            finish_reason=reason,
            error=error,
            prompt=st.prompt_text if st.request.return_prompt else None,
            metrics=metrics,
            parse_errors=parse_errors,
        )
        if st.finish(response):
            self._metrics.record(st.submit_t, now, response)
            return response
        return None
