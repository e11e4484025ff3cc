# SPDX-License-Identifier: Apache-2.0
"""Shared helpers for the benchmarks: arguments, the machine's state, models, raw baselines,
timing, tables.

Every benchmark measures the engine and its raw ``transformers`` baseline side
by side in the same process, interleaved run by run, and reports medians and
their ratio, so a busy machine slows both sides alike.

Every engine benchmark runs on the tiny test models and, with ``--model
PATH_OR_NAME`` (repeatable), on real models beside them: a checkpoint
directory, a GGUF file (converted once into mp13's cache), a hub id in the
local Hugging Face cache, or a named model such as ``smollm2-135m``
(``mp13_engine.models``, fetched once).

Every benchmark runs inside ``measuring()``: torch on one thread (the README's
figures were measured so) and the machine's load average printed before and
after, so a reader can tell a quiet run from a busy one. A missing optional
package or model ends the run with ``fail``'s one-line message saying what to
install, not a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pathlib
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn

import attrs

if TYPE_CHECKING:
    import torch

    from mp13_engine import Engine

SIZES = ("tiny", "small")


def new_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser; ``--help`` shows ``doc`` (its module docstring) as written."""
    return argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def add_repeats_option(parser: argparse.ArgumentParser, default: int, what: str) -> None:
    """Add ``--repeats N``: how many times each side is measured (``what``)."""
    parser.add_argument(
        "--repeats",
        type=int,
        default=default,
        metavar="N",
        help=f"{what} (default {default}); fewer is quicker, more is steadier",
    )


def fail(message: str) -> NoReturn:
    """End the benchmark with ``message`` on stderr and exit status 2, without a traceback."""
    print(f"{pathlib.Path(sys.argv[0]).name}: {message}", file=sys.stderr)
    raise SystemExit(2)


def require(module: str, why: str) -> ModuleType:
    """Import an optional package or ``fail`` saying what to install (``why``: what needs it)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        fail(
            f"{why} needs the {module!r} package, which is not installed ({exc}); install the "
            'benchmark extras with pip install -e ".[bench]" and run it again'
        )


def machine_load() -> str:
    """The load average, with the CPU count it should be read against."""
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


@contextlib.contextmanager
def measuring(pin_torch: bool = True) -> Iterator[None]:
    """Pin torch to one thread and print the machine's load before and after the block."""
    if pin_torch:  # bench_context.py measures SQLite and imports no torch
        import torch

        torch.set_num_threads(1)
    print(f"load before: {machine_load()}")
    yield
    print(f"\nload after: {machine_load()}")


#: ``add_repeats_option``'s words for the benchmarks that time with ``interleaved``.
INTERLEAVED_RUNS = "interleaved runs of each side per model, after 2 warm-up runs"


def run_benchmark(
    parser: argparse.ArgumentParser,
    measure: Callable[[argparse.Namespace], object],
    argv: Sequence[str] | None = None,
    *,
    models: bool = True,
    quiet: bool = False,
    pin_torch: bool = True,
) -> None:
    """A benchmark's ``main``: add ``--model`` (``models``), parse ``argv``, then run
    ``measure(args)`` inside ``measuring()``; ``quiet`` silences library warnings first.

    ``args.workdir`` is the run's scratch folder (the tiny models go there), removed when
    the run ends: every run used to leave its ~15 MB of models in the temp folder.
    transformers draws no progress bars in the run: a "Loading weights" bar for each model
    (loaded in a second, and again for every side of a comparison) split the printed tables.
    """
    if models:
        add_model_option(parser)
    args = parser.parse_args(argv)
    if quiet:
        quiet_libraries()
    with (
        tempfile.TemporaryDirectory(prefix="mp13-bench-") as tmp,
        measuring(pin_torch),
        _no_progress_bars(pin_torch),
    ):
        args.workdir = pathlib.Path(tmp)
        measure(args)


def _no_progress_bars(uses_transformers: bool) -> contextlib.AbstractContextManager[None]:
    """``_compat.no_progress_bars()``, or nothing for bench_context.py (it imports no torch,
    and mp13_engine._compat imports transformers only inside the block)."""
    if not uses_transformers:
        return contextlib.nullcontext()
    from mp13_engine._compat import no_progress_bars

    return no_progress_bars()


def uncached_engines(
    root: pathlib.Path, extra: Sequence[str], **load: object
) -> Iterator[tuple[str, Engine]]:
    """(label, engine) for the tiny models (built in ``root``) and each ``--model`` in
    ``extra``, one at a time, on the CPU with the prefix cache off: every repetition
    computes its prompt, as the raw side does (``bench_engine_arrivals.py`` shows what the
    cache saves)."""
    from mp13_engine import Engine

    for label, path in build_models(root, extra=extra).items():
        with Engine.load(str(path), device="cpu", prefix_cache_mb=0, **load) as engine:
            yield label, engine


def quiet_libraries() -> None:
    """Silence the library notices the adapter and training runs trigger that say nothing
    about the run, each by its own message, so the tables stay readable.

    This used to ignore every warning and log line below ERROR, which also hid the engine's
    own (a fused LoRA plan that failed, a training job's advice) from the one reading the
    figures. What is left: transformers' FutureWarning on ``is_gradient_checkpointing``,
    which PEFT reads in every ``PeftModel.__init__`` (the raw baselines wrap models too), and
    bitsandbytes' "pip install kernels" notice when the raw baseline imports PEFT before any
    engine has loaded (the engine drops it the same way, ``_compat`` says why).
    """
    from mp13_engine._compat import install_kernels_notice_filter

    warnings.filterwarnings(
        "ignore",
        message="`is_gradient_checkpointing` is deprecated",
        category=FutureWarning,
        module=r"transformers\.modeling_utils",
    )
    install_kernels_notice_filter()


def add_model_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--model PATH_OR_NAME`` (repeatable) to a benchmark's parser."""
    from mp13_engine import models

    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="PATH_OR_NAME",
        help=(
            "also run on this model, beside the tiny ones: a checkpoint directory, a GGUF "
            "file, a hub id in the local cache, or a named model "
            f"({', '.join(models.names())}; fetched once). Repeat for several."
        ),
    )


def resolve_model(spec: str) -> tuple[str, str]:
    """(label, loadable checkpoint directory or hub id) for a ``--model`` value.

    Named models are fetched (with progress lines); GGUF files are converted into
    mp13's cache, so raw ``transformers`` baselines can load the same directory.
    A model that cannot be fetched or converted (no network, no ``gguf`` package)
    ends the run with mp13's message, which says what to do.
    """
    from mp13_engine import Mp13Error

    try:
        return _resolve_model(spec)
    except Mp13Error as exc:
        fail(f"--model {spec}: {exc}")


def _resolve_model(spec: str) -> tuple[str, str]:
    from mp13_engine import models

    if spec in models.names():
        path = models.fetch(spec, progress=lambda p: print(f"[{spec}] {p.stage}: {p.message}"))
        return spec, str(path)
    local = pathlib.Path(os.path.expanduser(spec))
    if local.exists():
        from mp13_engine._gguf import cached_checkpoint, find_gguf

        gguf = find_gguf(local)
        if gguf is not None:
            path = cached_checkpoint(gguf, "float32", progress=lambda p: print(p.message))
            return gguf.stem, str(path)
        return local.resolve().name, str(local)
    _require_cached_hub_id(spec)
    return spec, spec  # a hub id: Engine.load finds it in the local cache


def _require_cached_hub_id(spec: str) -> None:
    """``fail`` now, before any model is measured, unless ``spec`` is in the local hub cache
    (the engine would refuse it only when its turn came, after the tiny models' runs)."""
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(spec, local_files_only=True)
    except Exception as exc:  # not cached, or not a valid hub id at all
        fail(
            f"--model {spec}: neither a local path, a named model nor a hub id in the local "
            f"Hugging Face cache ({type(exc).__name__}); give a checkpoint directory or GGUF "
            f"file, download it first (hf download {spec}), or use a named model"
        )


def build_models(
    root: pathlib.Path, extra: Sequence[str] = (), sizes: Sequence[str] = SIZES
) -> dict[str, pathlib.Path | str]:
    """The tiny test models of ``sizes`` (built offline in ``root``), then each ``--model``
    in ``extra``."""
    from mp13_engine.testing import build_tiny_model

    built: dict[str, pathlib.Path | str] = {
        size: build_tiny_model(root / size, family="chatml", size=size) for size in sizes
    }
    for spec in extra:
        label, path = resolve_model(spec)
        built[label] = path
    return built


def prompt_ids(engine, text: str) -> list[int]:
    return engine._state.tokens.encode(engine.format_prompt(text))


def raw_generate(model, rows: list[list[int]], pad_id: int, **kwargs) -> torch.Tensor:
    """One plain HF ``generate`` over left-padded ``rows`` (the baseline)."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        mask[i, width - len(r) :] = 1
    with torch.inference_mode():
        return model.generate(
            input_ids=ids.to(model.device),
            attention_mask=mask.to(model.device),
            do_sample=False,
            pad_token_id=pad_id,
            **kwargs,
        )


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


@attrs.frozen
class Timing:
    """Seconds per run: the median, and the minimum (least disturbed by a busy machine)."""

    median: float
    best: float


def interleaved(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 2
) -> dict[str, Timing]:
    """Timings per named function, running them round-robin ``repeats`` times."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            times[k].append(timed(fn))
    return {k: Timing(statistics.median(v), min(v)) for k, v in times.items()}


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``: the nearest sample, no interpolation."""
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
