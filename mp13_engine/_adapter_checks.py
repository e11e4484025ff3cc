# SPDX-License-Identifier: Apache-2.0
"""What an adapter must pass before the engine's model is touched: its name, config, layers.

``AdapterManager`` (``_adapters``) runs these before it loads, names, saves or combines
an adapter; each raises an ``AdapterError`` that says what is wrong and what to do, and none
changes the model, so a refused adapter leaves the engine as it was. ``unknown_adapter``
says what to do about a name the manager does not know. The checks that read
an adapter directory's files (shapes, biases, the base it was made for) are
``_adapter_files``'; these read its PEFT config, its name and the model it would join.

Invariants: an adapter name is a name, never a path (``adapter_name_problem``); a loaded
adapter is plain LoRA with at least one LoRA layer (not DoRA, which PEFT cannot serve per
row); a combination never holds an adapter whose weights live outside its LoRA factors
(``OUTSIDE_FACTORS``), which PEFT's sum of deltas would drop silently.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from mp13_engine._adapter_files import adapter_name_problem
from mp13_engine._compat import token_layer_clashes
from mp13_engine._errors import AdapterError
from mp13_engine._types import BASE_ADAPTER

#: LoRA settings whose weights live outside LoRA's factors, and what they hold: PEFT's
#: combination (add_weighted_adapter) sums factors only, so it would serve without them.
OUTSIDE_FACTORS = MappingProxyType(
    {
        "modules_to_save": "whole modules of its own",
        "trainable_token_indices": "token embeddings of its own",
    }
)


def adapter_folder(path: object) -> Path:
    """A caller's adapter folder as a ``Path``; ``AdapterError`` for anything but a path."""
    if not isinstance(path, (str, os.PathLike)):
        raise AdapterError(
            f"an adapter folder is a path (a str or os.PathLike), not {type(path).__name__}"
        )
    try:
        os.fsencode(path)
    except UnicodeEncodeError as exc:
        raise AdapterError(
            f"the adapter folder {path!r} has characters the file system cannot encode"
        ) from exc
    return Path(path)


def check_name(name: str) -> None:
    problem = adapter_name_problem(name)
    if problem is not None:
        raise AdapterError(f"Invalid adapter name {name!r}: {problem}. Pick another name.")


def unknown_adapter(name: object, known: list[str], *, training: bool) -> AdapterError:
    """The AdapterError for a request or call naming ``name``, which is not loaded (``known``
    are): still training (``training``), not a name at all (a folder's path: what to load),
    or just unknown (how to load it, or use the base model)."""
    if training:
        return AdapterError(
            f"Adapter {name!r} is still being trained (engine.train); requests can use it "
            f"when its job ends (job.result()). Loaded adapters: {known or 'none'}."
        )
    # A name load(name=) would refuse (a path, say) gets no advice to pass it there.
    problem = adapter_name_problem(name)
    folder = Path(name).name if isinstance(name, str) else None
    if problem is not None and folder and folder != name and not adapter_name_problem(folder):
        return AdapterError(
            f"Unknown adapter {name!r}: {problem}. Load the folder with "
            f"engine.adapters.load({name!r}) and use the name it gets (the folder's name, "
            f"{folder!r}); loaded adapters: {known or 'none'}."
        )
    if problem is not None:
        return AdapterError(
            f"Unknown adapter {name!r}: {problem}; loaded adapters: {known or 'none'}."
        )
    return AdapterError(
        f"Unknown adapter {name!r}; loaded adapters: {known or 'none'}. Load it with "
        f"engine.adapters.load(path, name={name!r}) or use {BASE_ADAPTER!r} for the base model."
    )


def check_has_lora_layers(directory: Path, config: Any) -> None:
    """AdapterError for a config that targets no layer (``target_modules`` empty; ``None``
    makes PEFT pick the model type's defaults): PEFT refuses to load it, with advice about
    excluded modules that does not apply to a saved adapter."""
    targets = config.target_modules
    if targets is None or targets or getattr(config, "target_parameters", None):
        return
    saved = getattr(config, "modules_to_save", None)
    only = f", only modules_to_save={sorted(saved)}" if saved else ""
    raise AdapterError(
        f"Adapter {str(directory)!r} has no LoRA layers (target_modules is empty{only}), "
        "which PEFT cannot load. Retrain it with target_modules naming the layers to adapt "
        '(e.g. "all-linear"), keeping modules_to_save if you need those modules.'
    )


def check_no_token_clash(model: Any, directory: Path, config: Any) -> None:
    """AdapterError if the adapter in ``directory`` and a loaded one would share a layer,
    one with LoRA and the other with trainable tokens: PEFT cannot stack those, and failed
    halfway (LoRA layers of the refused adapter left in the model)."""
    clashes = token_layer_clashes(model, config)
    if not clashes:
        return
    layer, others = next(iter(clashes.items()))
    tokens = bool(getattr(config, "trainable_token_indices", None))
    what = (
        f"trainable tokens (trainable_token_indices) on {layer!r}"
        if tokens
        else f"LoRA (target_modules) on {layer!r}"
    )
    has = "LoRA" if tokens else "trainable tokens"
    if others:
        where = f"where loaded adapter(s) {sorted(others)} have {has}"
        fix = f"Unload {sorted(others)} first, or retrain one of them without that layer."
    else:
        where = f"which PEFT still wraps for the {has} of an adapter unloaded since"
        fix = "Unload every adapter (the base model is then unwrapped) before loading it."
    raise AdapterError(
        f"Adapter {str(directory)!r} puts {what}, {where}; PEFT cannot stack the two on one "
        f"layer. {fix}"
    )


def name_from_folder(directory: Path) -> str:
    """The folder's name as the adapter's name; AdapterError saying to pass ``name=`` if it
    cannot be one (``pirate-v1.0``): the caller never chose that name, so "pick another"
    alone would not tell them where."""
    name = directory.name
    problem = adapter_name_problem(name)
    if problem is None:
        return name
    fixed = re.sub(r"[/\\:.\s]+", "-", name).strip("-_ ")
    hint = f"name={fixed!r}" if fixed and adapter_name_problem(fixed) is None else "name=..."
    raise AdapterError(
        f"The adapter folder's name {name!r} cannot name an adapter: {problem}. Give it a "
        f"name: engine.adapters.load({str(directory)!r}, {hint})."
    )


def read_lora_config(directory: Path) -> Any:
    """The PEFT ``LoraConfig`` of the adapter in ``directory``; AdapterError when it cannot
    be read, is not LoRA, is DoRA, or adapts no layer (``check_has_lora_layers``)."""
    from peft import LoraConfig, PeftConfig

    try:
        config = PeftConfig.from_pretrained(str(directory))
    except KeyError as exc:  # PEFT picks the config class by peft_type
        raise AdapterError(
            f"The adapter config in {str(directory)!r} names a peft_type PEFT does not know "
            f'({exc}). mp13 serves LoRA adapters (peft_type "LORA") saved by PEFT.'
        ) from exc
    except (ValueError, OSError, TypeError) as exc:
        raise AdapterError(
            f"Cannot read the adapter config in {str(directory)!r}: {exc}. It must be a PEFT "
            "adapter directory (adapter_config.json + adapter_model.safetensors)."
        ) from exc
    if not isinstance(config, LoraConfig):
        kind = getattr(config.peft_type, "value", config.peft_type)  # "IA3", not "PeftType.IA3"
        raise AdapterError(
            f"Adapter {str(directory)!r} is a {kind} adapter; mp13 serves LoRA "
            "adapters only. Convert or retrain it as LoRA."
        )
    if getattr(config, "use_dora", False):
        # PEFT refuses per-row adapter_names with DoRA, and mp13 serves every request that
        # way: it would load, then fail every request that names it.
        raise AdapterError(
            f"Adapter {str(directory)!r} is a DoRA adapter (use_dora=True), which PEFT "
            "cannot serve per request in a mixed batch, as mp13 does. Merge it into the "
            "base model, or retrain it as plain LoRA."
        )
    check_has_lora_layers(directory, config)
    return config


def check_combinable(order: Sequence[str], configs: Mapping[str, Any]) -> None:
    """AdapterError when an adapter of ``order`` (PEFT ``configs`` by name) holds weights
    outside its LoRA factors (``OUTSIDE_FACTORS``).

    PEFT's combination copies modules_to_save from the first adapter's config and fills the
    copy from the base module, and leaves trainable tokens out: the adapter's own weights
    would be lost, silently.
    """
    for name in order:
        for setting, holds in OUTSIDE_FACTORS.items():
            value = getattr(configs[name], setting, None)
            if value:
                shown = str(value if isinstance(value, dict) else list(value))
                shown = shown if len(shown) <= 80 else shown[:76] + " ..."
                raise AdapterError(
                    f"Cannot combine adapters {order}: {name!r} brings {holds} "
                    f"({setting}={shown}), which a sum of LoRA deltas cannot hold. Use "
                    "it alone in its requests."
                )
