# SPDX-License-Identifier: Apache-2.0
"""Silence bitsandbytes' per-call 8-bit cast notice, once, for processes that load 8-bit models.

Concept
    bitsandbytes reports "MatMul8bitLt: inputs will be cast from ... to float16"
    on EVERY forward of an 8-bit layer whose input is not float16 (the normal
    case on CPU or with a bf16 model), which floods the console and says
    nothing actionable. Recent versions emit it as a ``logging`` record of
    ``bitsandbytes.autograd._functions``, older ones as a ``warnings.warn``.

    :func:`install_int8_cast_filter` is called when an 8-bit model is loaded
    and installs, once per process, a logging filter on that one logger and a
    ``warnings`` filter for that one message. Nothing is swapped around model
    calls: the earlier design (``catch_warnings`` around every wave and training
    step) replaced the process-wide warnings filter list from the worker thread,
    which lost filters other threads (another engine, the user) installed
    meanwhile (issue 11, item 18).

Invariants
    * Installed only when an 8-bit model is loaded; idempotent (a second 8-bit
      engine adds nothing); two threads calling it at once at worst add a filter twice.
    * Only that one message is dropped; every other warning and log record
      passes unchanged, and no other filter is touched. Importing this module
      imports neither torch nor bitsandbytes.
"""

from __future__ import annotations

import logging
import warnings

CAST_NOTICE = "MatMul8bitLt: inputs will be cast"
BNB_LOGGER = "bitsandbytes.autograd._functions"


class DropCastNotice(logging.Filter):
    """Drops bitsandbytes' 8-bit cast notice; passes every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(CAST_NOTICE)


def install_int8_cast_filter() -> None:
    """Drop the 8-bit cast notice from now on in this process (idempotent, thread-safe)."""
    # Two threads racing here can at worst add the same filter twice, which changes nothing.
    logger = logging.getLogger(BNB_LOGGER)
    if not any(isinstance(f, DropCastNotice) for f in logger.filters):
        logger.addFilter(DropCastNotice())
    # warnings.filterwarnings would move an identical filter to the front; check first so the
    # order of the user's own filters is left alone.
    if not any(_is_ours(f) for f in warnings.filters):
        warnings.filterwarnings("ignore", message=CAST_NOTICE)


def _is_ours(entry: tuple) -> bool:
    action, message = entry[0], entry[1]
    return action == "ignore" and getattr(message, "pattern", None) == CAST_NOTICE
