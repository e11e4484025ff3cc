# SPDX-License-Identifier: Apache-2.0
"""``RowOutput``: the one seam between the step loop and a request's output.

The loop (``_loop``) only ever asks four things of a request's state, all here:

* ``start(state) -> bool``: admit the row (False: it was cancelled or already
  resolved; leave it out);
* ``append(state, token) -> bool``: hand over one generated token (EOS
  excluded); True when the row must end now (a stop string completed, or a
  cancel is pending), the loop then calls ``finish(state, STOP)``;
* ``finish(state, reason, error=None) -> bool``: resolve once, idempotent (a
  pending cancel turns STOP/LENGTH into CANCELLED);
* ``ended(state) -> bool``: the request was resolved or asked to cancel from
  outside the loop (cancel, timeout, close): drop the row.

Today these map onto ``RequestState.push``/``commit`` and
``ResponseBuilder.finish``; the per-request output processor will implement
the same four on the state itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from mp13_engine._runner import ResponseBuilder
from mp13_engine._streams import RequestState
from mp13_engine._types import FinishReason


class RowOutput:
    """Drives ``RequestState`` / ``ResponseBuilder`` for the loop (see the module docstring)."""

    def __init__(self, builder: ResponseBuilder, decode: Callable[[list[int]], str]):
        self._builder = builder
        self._decode = decode

    def start(self, st: RequestState) -> bool:
        if st.done:
            return False
        if st.cancel_requested:
            self.finish(st, FinishReason.CANCELLED)
            return False
        st.start_t = time.perf_counter()
        return True

    def ended(self, st: RequestState) -> bool:
        return st.done or st.cancel_requested

    def append(self, st: RequestState, token: int) -> bool:
        if not st.tokens:
            st.first_token_t = time.perf_counter()
        stops = [s for s in st.request.stop if s]
        if not stops:
            st.push(token)
            return st.cancel_requested or st.done
        # Invisible to streams until checked, so a stream never shows text the
        # response then cuts away.
        st.push(token, commit=False)
        # A token yields >= 1 byte and a char needs <= 4, so this window covers the longest stop.
        tail = self._decode(st.tokens[-(max(len(s) for s in stops) * 4 + 4) :])
        if any(s in tail for s in stops):
            return True
        st.commit()
        return st.cancel_requested or st.done

    def finish(self, st: RequestState, reason: FinishReason, error: str | None = None) -> bool:
        if st.cancel_requested and reason is not FinishReason.ERROR:
            reason = FinishReason.CANCELLED
        return self._builder.finish(st, reason, error) is not None
