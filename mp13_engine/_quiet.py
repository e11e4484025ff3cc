# SPDX-License-Identifier: Apache-2.0
"""Silence bitsandbytes' per-call 8-bit cast notice around the engine's own model calls.

Concept
    bitsandbytes reports "MatMul8bitLt: inputs will be cast from ... to float16"
    on EVERY forward of an 8-bit layer whose input is not float16 (the normal
    case on CPU or with a bf16 model), which floods the console and says
    nothing actionable. Versions emit it as a ``warnings.warn`` or as a
    ``logging`` record, so :func:`quiet_int8_casts` handles both.

Invariants
    * Local, never process-wide: the warnings filter lives in a
      ``warnings.catch_warnings()`` block and the logging filter is attached
      to bitsandbytes' logger only for the duration of the block, then removed
      (so while the worker runs a wave, that one notice is dropped for every
      thread: the engine is then the only caller of its model).
    * Only that one message is dropped; every other warning and log record
      passes unchanged. Importing this module imports neither torch nor
      bitsandbytes.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

CAST_NOTICE = "MatMul8bitLt: inputs will be cast"
_BNB_LOGGER = "bitsandbytes.autograd._functions"


class _DropCastNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(CAST_NOTICE)


@contextmanager
def quiet_int8_casts() -> Iterator[None]:
    """Run the block without bitsandbytes' 8-bit cast notice (warning or log record)."""
    logger = logging.getLogger(_BNB_LOGGER)
    drop = _DropCastNotice()
    logger.addFilter(drop)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=CAST_NOTICE)
            yield
    finally:
        logger.removeFilter(drop)
