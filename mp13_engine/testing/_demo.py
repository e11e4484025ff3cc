# SPDX-License-Identifier: Apache-2.0
"""The built-in demo model: a tiny chatml model fully fine-tuned, offline, on a synthetic chat set.

Concept: ``build_demo_model(dest)`` builds a random tiny chatml model (``build_with_shape``) and
trains all its weights with a plain AdamW loop on ``_demo_data.demo_examples`` so that greedy
decoding answers a handful of prompts, emits a Hermes ``<tool_call>`` for arithmetic and time
questions (builtins ``calculator`` and ``current_time``), and quotes a tool's result after a
``<tool_response>``. ``demo_model_path()`` builds it once into a cache folder and reuses it.

Invariants:
- Real training, no hard-coded outputs: the loss is on the assistant's tokens only (the
  target turn, ending with ``<|im_end|>``); nothing else is written into the weights.
- Deterministic given the seed on one machine: all randomness comes from a local
  ``random.Random`` and ``torch.Generator``; the global RNGs are untouched. (Float reductions
  may differ across CPUs/thread counts, so weights are not promised byte-identical everywhere.)
- The long tool-listing system header is identical for every row of a step, so it is run once
  without gradient and its KV cache is shared by the batch; the rest gets full backprop.
- A cached model is only used when complete: it is built aside and renamed into place.
"""

from __future__ import annotations

import json
import pathlib
import random
import shutil
from collections.abc import Callable
from typing import Any

import attrs
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mp13_engine._cache import cache_root
from mp13_engine._compat import cache_argument, no_progress_bars
from mp13_engine._training._render import TrainingRow
from mp13_engine._training._trainer import batches
from mp13_engine.testing._build import BUILD_VERSION, SizeSpec, build_with_shape, built_once
from mp13_engine.testing._demo_data import DemoExample, demo_examples
from mp13_engine.testing._families import FAMILIES
from mp13_toolbox import Toolbox

# Names the cache folder: bump the second part when the data, shape or recipe changes.
DEMO_VERSION = f"{BUILD_VERSION}.1"

DEMO_SHAPE = SizeSpec(96, 2, 4, 2, 192, init_std=0.02, max_position_embeddings=4096)


@attrs.frozen
class DemoRecipe:
    """How the demo model is trained (defaults are what ``demo_model_path`` builds)."""

    seed: int = 0
    steps: int = 700
    batch_size: int = 16
    learning_rate: float = 1e-2
    rounds: int = 4  # passes over the paraphrases when generating the data


def demo_tools() -> list[dict[str, Any]]:
    """The tool specs the demo model is mainly trained with: the toolbox's builtins, as the REPL
    advertises them by default."""
    return Toolbox(builtins=True).specs()


def _tool_variants() -> list[list[dict[str, Any]] | None]:
    """Tool lists the model sees in training: the REPL's builtins, a subset, and none."""
    builtins = demo_tools()
    calculator_only = [s for s in builtins if s["function"]["name"] == "calculator"]
    return [builtins, calculator_only or None, None]


def _target(example: DemoExample) -> str:
    if example.tool_call is not None:
        name, args = example.tool_call
        return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call><|im_end|>'
    return f"{example.answer}<|im_end|>"


@attrs.frozen
class _Variant:
    """One tool list: its header ids and every example's suffix ids with its loss mask."""

    header: list[int]
    rows: list[TrainingRow]


def _encode(
    tok: Any,  # the family's transformers tokenizer
    examples: list[DemoExample],
    tools: list[dict[str, Any]] | None,
    rng: random.Random,
) -> _Variant:
    def render(messages: list[dict[str, Any]], gen: bool) -> str:
        text: str = tok.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=gen
        )
        return text

    # The header is everything before the first user turn (Hermes always lists the tools).
    probe = render([{"role": "user", "content": "x"}], gen=False)
    header = probe[: probe.index("<|im_start|>user")]
    rows = []
    for example in examples:
        messages = list(example.messages)
        if rng.random() < 0.25:
            messages.insert(0, {"role": "system", "content": "You are a helpful assistant."})
        prompt = render(messages, gen=True)
        if not prompt.startswith(header):
            raise AssertionError("the chat template's tool header is not a prefix of the prompt")
        context = tok(prompt[len(header) :], add_special_tokens=False).input_ids
        target = tok(_target(example), add_special_tokens=False).input_ids
        rows.append(TrainingRow((*context, *target), (0,) * len(context) + (1,) * len(target)))
    return _Variant(tok(header, add_special_tokens=False).input_ids, rows)


def _train(
    model: torch.nn.Module,
    variants: list[_Variant],
    recipe: DemoRecipe,
    pad_id: int,
    progress: Callable[[int, float], None] | None,
) -> float:
    gen = torch.Generator().manual_seed(recipe.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / 20) * max(0.05, 1 - step / recipe.steps)
    )
    model.train()
    cache_name = cache_argument(model)
    loss_value = float("nan")
    for step in range(recipe.steps):
        variant = variants[step % len(variants)]
        picks = torch.randint(len(variant.rows), (recipe.batch_size,), generator=gen).tolist()
        batch = batches([variant.rows[i] for i in picks], pad_id, torch.device("cpu"))
        ids, labels = batch["input_ids"], batch["labels"]
        header = torch.ones((len(picks), len(variant.header)), dtype=torch.long)
        mask = torch.cat([header, batch["attention_mask"]], dim=1)
        with torch.no_grad():
            cache = model(torch.tensor([variant.header]), use_cache=True)[cache_name]
        cache.batch_repeat_interleave(len(picks))
        out = model(input_ids=ids, attention_mask=mask, labels=labels, **{cache_name: cache})
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        loss_value = float(out.loss.detach())
        if progress is not None:
            progress(step + 1, loss_value)
    model.eval()
    return loss_value


def build_demo_model(
    dest_dir: str | pathlib.Path,
    recipe: DemoRecipe | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> pathlib.Path:
    """Build and train the demo model into ``dest_dir`` (about a minute on 2 idle CPU cores).

    ``progress(step, loss)`` is called after every training step.
    """
    recipe = recipe or DemoRecipe()
    dest = pathlib.Path(dest_dir)
    build_with_shape(dest, FAMILIES["chatml"], DEMO_SHAPE, seed=recipe.seed)
    tok = AutoTokenizer.from_pretrained(dest, local_files_only=True)
    with no_progress_bars():  # the model just built: a "Loading weights" bar says nothing
        model = AutoModelForCausalLM.from_pretrained(dest, local_files_only=True)
    rng = random.Random(recipe.seed)
    examples = demo_examples(rng, rounds=recipe.rounds)
    variants = [_encode(tok, examples, tools, rng) for tools in _tool_variants()]
    with torch.random.fork_rng(devices=[]):  # dropout-free, but keep the global RNG untouched
        _train(model, variants, recipe, tok.pad_token_id, progress)
    with no_progress_bars():
        model.save_pretrained(dest)
    return dest


#: The demo model as shipped in the package (1.5 MB), built by ``scripts/build_demo_model.py
#: --ship``. Shipping it lets ``mp13chat`` start in seconds on a fresh machine; building it
#: takes one to two minutes of CPU, so that only happens when no matching copy is shipped.
SHIPPED_DEMO_DIR = pathlib.Path(__file__).with_name("_demo_model")
_SHIPPED_MARKER = "mp13_demo.json"


def shipped_demo_model() -> pathlib.Path | None:
    """The shipped demo model's folder if it was built for this ``DEMO_VERSION``, else None."""
    marker = SHIPPED_DEMO_DIR / _SHIPPED_MARKER
    try:
        meta = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if meta.get("version") != DEMO_VERSION:
        return None  # a recipe change outdated it: build instead of serving a stale model
    if not (SHIPPED_DEMO_DIR / "model.safetensors").exists():
        return None
    return SHIPPED_DEMO_DIR


def ship_demo_model(src: str | pathlib.Path) -> pathlib.Path:
    """Copy a built demo model into the package as the shipped copy for ``DEMO_VERSION``."""
    SHIPPED_DEMO_DIR.mkdir(exist_ok=True)
    for f in pathlib.Path(src).iterdir():
        if f.is_file() and f.name != _SHIPPED_MARKER:
            shutil.copyfile(f, SHIPPED_DEMO_DIR / f.name)
    (SHIPPED_DEMO_DIR / _SHIPPED_MARKER).write_text(
        json.dumps({"version": DEMO_VERSION, "built_by": "scripts/build_demo_model.py --ship"})
        + "\n",
        encoding="utf-8",
    )
    return SHIPPED_DEMO_DIR


def demo_model_path(
    cache_dir: str | pathlib.Path | None = None, *, use_shipped: bool = True
) -> pathlib.Path:
    """The demo model's folder: a copy built in the cache, else the shipped one, else a new build.

    The cache folder is ``cache_dir``, else mp13's cache (``$MP13_CACHE``, see
    ``tiny_model_path``); a built model lives in ``demo-<DEMO_VERSION>`` inside it. A model
    already built there wins (so a user can rebuild and use their own); otherwise the copy
    shipped in the package is used when it matches ``DEMO_VERSION`` (``use_shipped=False``
    skips it); otherwise the model is built there on first use (one to two minutes on CPU)
    and reused afterwards.
    """
    root = pathlib.Path(cache_dir).expanduser() if cache_dir else cache_root()
    dest = root / f"demo-{DEMO_VERSION}"
    if (dest / "model.safetensors").exists():
        return dest
    shipped = shipped_demo_model() if use_shipped else None
    return shipped if shipped is not None else built_once(dest, build_demo_model)
