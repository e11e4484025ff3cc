# SPDX-License-Identifier: Apache-2.0
"""transformers' "Loading weights" bar as mp13 ``Progress`` reports (stage ``"load"``).

``Engine.load(..., progress=)`` promises that the slow steps of a load report to the
callback; the longest of them on a real model is transformers reading the weights, which
draws a tqdm bar on the user's stderr. transformers offers one process-wide hook on the
bars it makes (``transformers.utils.logging.set_tqdm_hook``); while a load runs, the hook
set here turns that load's bars into reports and hands every other bar on.

Invariants: without ``progress`` nothing changes (transformers draws its bar, which its own
``disable_progress_bar()`` turns off); only bars made on the loading thread while the load
runs are routed; the hook that was there before is handed every other bar and put back
after, unless a later one replaced ours; a transformers without ``set_tqdm_hook`` (older
5.x releases) keeps drawing its bar, and the load goes on.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import attrs
from tqdm import tqdm  # type: ignore[import-untyped]  # transformers' own dependency

from mp13_engine._cache import Progress, report


@contextlib.contextmanager
def weights_reported_to(progress: Progress | None) -> Iterator[None]:
    """While the block runs, transformers' "Loading weights" bar of this thread reports to
    ``progress`` (stage ``"load"``) instead of drawing on the user's stderr; without
    ``progress``, transformers draws it as it would (its own switch,
    ``transformers.utils.logging.disable_progress_bar()``, turns it off).

    transformers has one process-wide bar hook; the one set here routes only the bars this
    thread makes while the block runs and hands every other bar to the hook that was there
    before (another thread's load, the user's), and it is taken out again after, unless a
    later hook replaced it (which then keeps ours behind it, inactive)."""
    if progress is None:
        yield
        return
    from transformers.utils import logging as hf_logging

    set_hook = getattr(hf_logging, "set_tqdm_hook", None)
    if set_hook is None:  # an older transformers 5.x: its bar draws as before
        yield
        return
    route = _RouteBars(progress)
    route.previous = set_hook(route)
    try:
        yield
    finally:
        route.active = False
        current = set_hook(route.previous)
        if current is not route:  # a later hook (another load's, the user's) stays
            set_hook(current)


TqdmHook = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]


@attrs.define
class _RouteBars:
    """transformers' tqdm hook during one load: its thread's bars report to ``progress``."""

    progress: Progress
    previous: TqdmHook | None = None
    thread: int = attrs.field(factory=threading.get_ident)
    active: bool = True

    def __call__(
        self, factory: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]
    ) -> Any:
        if self.active and threading.get_ident() == self.thread:
            return _ReportedBar(*args, report_to=self.progress, **kw)
        if self.previous is not None:
            return self.previous(factory, args, kw)
        return factory(*args, **kw)


class _ReportedBar(tqdm):  # type: ignore[misc]  # tqdm has no type hints
    """A tqdm bar that draws nothing and reports to an mp13 ``Progress`` (about every 5%)."""

    def __init__(self, *args: Any, report_to: Progress, **kwargs: Any) -> None:
        kwargs["disable"] = True
        self._what = str(kwargs.get("desc") or "loading the weights").lower()
        super().__init__(*args, **kwargs)
        self._report_to = report_to
        self._done = 0
        self._shown = -1
        self._show()

    def __iter__(self) -> Iterator[Any]:
        for item in self.iterable:  # a disabled tqdm walks its iterable without update()
            yield item
            self.update(1)

    def update(self, n: float | None = 1) -> bool | None:
        self._done += int(n or 0)
        self._show()
        return None

    def _show(self) -> None:
        total = self.total if isinstance(self.total, int) and self.total > 0 else None
        step = self._done * 20 // total if total else self._done
        if step == self._shown:
            return
        self._shown = step
        of = f" of {total}" if total else ""
        report(self._report_to, "load", self._done, total, f"{self._what}: {self._done}{of}")
