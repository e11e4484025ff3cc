# SPDX-License-Identifier: Apache-2.0
"""Keep bitsandbytes 4-bit weights in one layout, so adapters can be loaded at any time.

Concept
    On a CPU with AVX512-BF16, bitsandbytes' ``Linear4bit.forward`` repacks its
    weight into a CPU-specific layout the first time it runs in inference (eval
    mode, no grad), and marks the quant state ``packing_format_for_cpu``. PEFT,
    when it wraps such a layer with LoRA (loading or training an adapter),
    reads the layer's state dict, which converts the weight back with an
    inverse bitsandbytes itself calls best-effort; the next forward repacks that
    again, and from then on every output is garbage — for the base model too
    (issue 12, fix 6; plain PEFT on bitsandbytes does the same).

    The engine therefore turns that repacking off on every 4-bit layer when it
    loads a model (``keep_4bit_layout``): bitsandbytes reads the per-layer flag
    ``support_avx512bf16_for_cpu`` to decide, and without it computes from the
    standard layout (correctness over the packed layout's possible CPU speed-up,
    which needs the optional ``kernels`` package anyway). ``check_4bit_layout`` is
    the safety net: if
    a layer was repacked anyway (a future bitsandbytes that ignores the flag),
    loading or training an adapter is refused with a clear error instead of
    corrupting the model.

Invariants
    * Only attributes of the model's own layers change; nothing process-wide.
    * Importing this module imports neither torch nor bitsandbytes.
"""

from __future__ import annotations

from typing import Any

from mp13_engine._errors import AdapterError

_REPACK_FLAG = "support_avx512bf16_for_cpu"


def _is_4bit(module: Any) -> bool:
    weight = getattr(module, "weight", None)
    return type(weight).__name__ == "Params4bit" and hasattr(weight, "quant_state")


def keep_4bit_layout(model: Any) -> int:
    """Stop bitsandbytes repacking the 4-bit weights of ``model``; return the layers changed."""
    changed = 0
    for module in model.modules():
        if _is_4bit(module) and getattr(module, _REPACK_FLAG, False):
            setattr(module, _REPACK_FLAG, False)
            changed += 1
    return changed


def repacked_layers(model: Any) -> list[str]:
    """Names of 4-bit layers whose weight bitsandbytes has repacked into its CPU layout."""
    return [
        name
        for name, module in model.named_modules()
        if _is_4bit(module) and getattr(module.weight.quant_state, "packing_format_for_cpu", False)
    ]


def check_4bit_layout(model: Any, action: str) -> None:
    """``AdapterError`` if LoRA cannot safely wrap ``model`` now (see the module docstring)."""
    repacked = repacked_layers(model)
    if repacked:
        raise AdapterError(
            f"Cannot {action}: bitsandbytes has repacked the 4-bit weights of "
            f"{len(repacked)} layer(s) (e.g. {repacked[0]}) for CPU inference, and wrapping "
            "them with LoRA now would corrupt every output. Load or train adapters before the "
            "first request on this engine, or load the model again."
        )
