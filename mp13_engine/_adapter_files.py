# SPDX-License-Identifier: Apache-2.0
"""Adapter directories on disk: their names, their files and metadata, what they fit.

Invariants: an adapter name is a name, never a path (``adapter_name_problem``),
so ``adapters_dir/<name>`` stays inside ``adapters_dir``. An adapter directory
is plain PEFT format (``adapter_config.json`` +
``adapter_model.safetensors``) that ``PeftModel.from_pretrained`` loads; mp13
adds only ``mp13_adapter.json``; ``ADAPTER_FILES`` are the files that make up
one saved adapter. Writing a directory (whole, swapped in) is ``_adapter_save``'s
job, which reads the layout from here. ``check_compatible`` reads shapes without
loading tensors and never touches the model; ``check_wrappable`` refuses a
base model that a device map partly offloaded, or one whose 4-bit weights
bitsandbytes repacked (``_compat``): PEFT cannot wrap either safely, so it runs
before the model is touched.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any

from mp13_engine._compat import repacked_4bit_layers
from mp13_engine._errors import AdapterError
from mp13_engine._types import BASE_ADAPTER

#: File mp13 writes next to PEFT's files in an adapter directory.
METADATA_FILE = "mp13_adapter.json"

# Characters that would make a name a path (or a drive) when joined to adapters_dir.
_PATH_CHARS = ("/", "\\", ":")


def adapter_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name an adapter, or None when it can.

    An adapter name is a name, never a path: it becomes a PEFT adapter name
    (no '.', which PEFT reads as a module path) and the directory
    ``adapters_dir/<name>`` a trained adapter is saved to, so it must not hold a
    path separator, a drive colon or a control character (issue 11, item 16).
    """
    if not isinstance(name, str) or not name:
        return "it must be a non-empty string"
    if name == BASE_ADAPTER or name.startswith("__"):
        return f"names starting with '__' (such as {BASE_ADAPTER!r}) are reserved"
    bad = [c for c in (*_PATH_CHARS, ".") if c in name]
    if bad:
        return (
            "an adapter name is a name, not a path, so it may not contain '/', '\\', ':' or "
            f"'.' (this one has {' and '.join(repr(c) for c in bad)})"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in name) or name != name.strip():
        return "it may not contain control characters or start or end with spaces"
    return None


#: Files that make up a saved adapter: replaced or removed together, never carried over
#: from the adapter saved before (a stale ``adapter_model.bin`` beside new safetensors).
ADAPTER_FILES = frozenset(
    {"adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", METADATA_FILE}
)


def read_metadata(folder: Path | None) -> dict[str, Any]:
    """mp13's metadata in ``folder``; {} when there is none or it cannot be read."""
    file = None if folder is None else folder / METADATA_FILE
    if file is None or not file.is_file():
        return {}
    try:
        meta = json.loads(file.read_text())
    except (ValueError, OSError):
        return {}
    return meta if isinstance(meta, dict) else {}


def holds_adapter(folder: Path) -> bool:
    """Whether ``folder`` holds a saved adapter (files a save into it would overwrite)."""
    return any((folder / n).is_file() for n in ADAPTER_FILES - {METADATA_FILE})


def instead_of_adapter(path: Path) -> str:
    """What ``path``, which is not an adapter folder, holds instead (with what to do), or "".

    A newcomer gives ``adapters.load`` the model's GGUF file or folder, or a file
    inside the adapter folder; "no adapter_config.json" alone does not tell them why.
    """
    from mp13_engine._gguf import has_magic, is_adapter_file

    if path.is_file():
        if has_magic(path) and is_adapter_file(path):
            return (
                f" {str(path)!r} is a LoRA adapter in llama.cpp's GGUF format, which mp13 "
                "cannot read; give the adapter's PEFT folder instead."
            )
        if has_magic(path):
            return (
                f" {str(path)!r} is a GGUF model file, not a LoRA adapter: load it as the base "
                "model with Engine.load(path)."
            )
        if holds_adapter(path.parent):
            return f" It is a file; give the folder that holds it: {str(path.parent)!r}."
        return " It is a file, not a folder."
    if (path / "config.json").is_file():
        return (
            f" {str(path)!r} holds a model (config.json), not a LoRA adapter: load it as the "
            "base model with Engine.load(path)."
        )
    return ""


def base_model_name(model: Any) -> str | None:
    """What ``model`` was loaded from, as adapters record it (``base_model_name_or_path``).

    The folder transformers loaded is a cache's, for a GGUF file (mp13's converted copy) and
    for a hub model (the hub cache's snapshot): a path that means nothing elsewhere and goes
    when the cache is cleared. For those it is what the user loaded: the GGUF file's path, or
    the hub id. Loading an adapter never reads it (it is checked against the engine's model
    module by module); it tells people which base model the adapter was made for.
    """
    return recorded_base(model.name_or_path or model.config.name_or_path or None)


def recorded_base(name: str | None) -> str | None:
    """``name``, or what was loaded when it is a folder of mp13's GGUF cache or the hub's
    (an adapter that recorded one, saved before mp13 named the base model this way)."""
    if not name:
        return None
    from mp13_engine._gguf import ENTRY_FILE

    folder = Path(name)
    try:
        entry = json.loads((folder / ENTRY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        entry = None
    source = entry.get("source") if isinstance(entry, dict) else None
    if isinstance(source, str) and source:
        return source
    parts = folder.parts  # <hub cache>/models--ORG--NAME/snapshots/<revision>
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3].removeprefix("models--").replace("--", "/")
    return name


def _module_sizes(module: Any) -> tuple[int, int] | None:
    if hasattr(module, "in_features") and hasattr(module, "out_features"):
        return int(module.in_features), int(module.out_features)
    if hasattr(module, "num_embeddings") and hasattr(module, "embedding_dim"):
        return int(module.num_embeddings), int(module.embedding_dim)
    return None


def _adapter_shapes(directory: Path) -> dict[str, tuple[int, ...]]:
    file = directory / "adapter_model.safetensors"
    if file.is_file():
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(file), framework="pt") as handle:
                return {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}  # noqa: SIM118
        except (SafetensorError, OSError) as exc:
            raise _unreadable(file, exc) from exc
    file = directory / "adapter_model.bin"
    if file.is_file():
        import pickle

        import torch

        try:
            state = torch.load(str(file), map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, OSError, EOFError) as exc:
            raise _unreadable(file, exc) from exc
        if not isinstance(state, dict):
            raise _unreadable(file, TypeError(f"it holds a {type(state).__name__}, not tensors"))
        return {k: tuple(v.shape) for k, v in state.items()}
    raise AdapterError(
        f"Adapter directory {str(directory)!r} has no adapter_model.safetensors or "
        "adapter_model.bin. Save it again with PEFT save_pretrained or engine.adapters.save."
    )


def _unreadable(file: Path, exc: BaseException) -> AdapterError:
    # torch's unpickling errors run to many lines of advice for torch.load's callers; the
    # first says what is wrong.
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return AdapterError(
        f"Cannot read the adapter weights in {str(file)!r} ({reason}): the file is damaged "
        "or not an adapter's weights. Save or copy the adapter again (PEFT save_pretrained "
        "or engine.adapters.save)."
    )


def check_wrappable(base: Any, what: str) -> None:
    """AdapterError when PEFT cannot safely wrap ``base`` to ``what`` (before it is touched).

    Refused: a base model partly offloaded by a device map (PEFT cannot put
    adapters on layers whose weights accelerate keeps on the ``meta`` device, and
    a failed attempt would leave half-wrapped layers behind), and one whose
    4-bit weights bitsandbytes repacked (see ``_compat``).
    """
    if any(p.device.type == "meta" for p in base.parameters()):
        raise AdapterError(
            f"Cannot {what}: part of the base model is offloaded by its device_map (its "
            "weights are on the meta device), and PEFT cannot add adapters there. Give the "
            "engine enough GPU/CPU memory (EngineConfig.max_memory) that no layer is offloaded."
        )
    repacked = repacked_4bit_layers(base)
    if repacked:
        raise AdapterError(
            f"Cannot {what}: bitsandbytes has repacked the 4-bit weights of "
            f"{len(repacked)} layer(s) (e.g. {repacked[0]}) for CPU inference, and wrapping "
            "them with LoRA now would corrupt every output. Load or train adapters before the "
            "first request on this engine, or load the model again."
        )


def check_compatible(base: Any, directory: Path, config: Any) -> None:
    """Raise AdapterError unless the adapter in ``directory`` fits ``base`` module by module.

    Checks, in order: the model family recorded by mp13 (if any), that every
    module the adapter's weights target exists in the base model, and that the
    LoRA matrices' shapes match that module's input/output sizes.
    """
    model_type = base.config.model_type or None
    meta = read_metadata(directory)
    if meta:
        theirs = meta.get("model_type")
        if theirs and model_type and theirs != model_type:
            raise AdapterError(
                f"Adapter {str(directory)!r} was trained on a {theirs!r} model "
                f"({meta.get('base_model')}), but the engine's base model is a {model_type!r} "
                f"model ({base_model_name(base)}). Load it on the base model it was trained for."
            )
    modules = dict(base.named_modules())
    problems: list[str] = []
    for key, shape in _adapter_shapes(directory).items():
        parsed = _parse_key(key)
        if parsed is None:
            continue
        module_name, factor = parsed
        module = modules.get(module_name)
        if module is None:
            problems.append(f"targets module {module_name!r}, which the base model does not have")
            continue
        sizes = _module_sizes(module)
        if sizes is not None and (problem := factor.misfit(shape, *sizes)) is not None:
            problems.append(f"{module_name}: {problem}")
    if problems:
        shown = "; ".join(problems[:5]) + (
            f"; ... ({len(problems)} problems)" if len(problems) > 5 else ""
        )
        raise AdapterError(
            f"Adapter {str(directory)!r} does not fit the engine's base model "
            f"({base_model_name(base)}, {model_type}); it was made for "
            f"{config.base_model_name_or_path!r}: {shown}. Load it on that base model, or "
            "retrain it for this one."
        )


#: ``init_lora_weights`` values whose initialisation rewrites the base layer's weights (PEFT
#: 0.21 ``LoraLayer.update_layer``: PiSSA, OLoRA and CorDA subtract the initial low-rank part
#: from them, LoftQ quantizes them) and runs again whenever the adapter is loaded, unless it
#: was saved converted (``path_initial_model_for_weight_conversion``, which records ``True``).
_BASE_REWRITING_INITS = ("pissa", "olora", "corda", "loftq")


def check_shares_no_base_weights(directory: Path, config: Any) -> None:
    """AdapterError for an adapter that would change the base model's own weights on load.

    The engine's base model is shared by every adapter and by requests on ``__base__``;
    such an adapter would silently change all their outputs, and keep changing them after
    it is unloaded. Refused: an ``init_lora_weights`` that rewrites base weights (PiSSA,
    OLoRA, CorDA, LoftQ saved unconverted) and base-layer biases saved with ``bias=`` other
    than ``"none"`` (PEFT loads them over the base model's biases).
    """
    init = config.init_lora_weights
    if isinstance(init, str) and init.lower().startswith(_BASE_REWRITING_INITS):
        raise AdapterError(
            f"Adapter {str(directory)!r} was saved with init_lora_weights={init!r}: loading it "
            "makes PEFT rewrite the base model's weights, which every other adapter and the "
            "base model share. Save it again converted to plain LoRA (PEFT save_pretrained(..., "
            "path_initial_model_for_weight_conversion=...)), or merge it into the base model."
        )
    # Its own biases are on lora_B (``lora_B.bias``); any other bias in the file is the base's.
    biases = [k for k in _adapter_shapes(directory) if k.endswith(".bias") and "lora_" not in k]
    if config.bias != "none" and biases:
        raise AdapterError(
            f"Adapter {str(directory)!r} was trained with bias={config.bias!r} and holds "
            f"{len(biases)} bias vector(s) of the base model (e.g. {biases[0]!r}): loading it "
            "would write them over the biases every other adapter and the base model share. "
            "Retrain it with bias='none' (or lora_bias=True, a bias of its own), or merge it "
            "into the base model."
        )


class _Factor(enum.Enum):
    """A LoRA weight in an adapter file, by the suffix of its key."""

    A = ".lora_A.weight"
    B = ".lora_B.weight"
    EMBEDDING_A = ".lora_embedding_A"
    EMBEDDING_B = ".lora_embedding_B"

    def misfit(self, shape: tuple[int, ...], n_in: int, n_out: int) -> str | None:
        """Why a weight of ``shape`` cannot sit on a module of these sizes; None if it fits."""
        match self:
            case _Factor.A if shape[-1] != n_in:
                return f"lora_A expects input size {shape[-1]}, module has {n_in}"
            case _Factor.B if shape[0] != n_out:
                return f"lora_B gives output size {shape[0]}, module has {n_out}"
            case _Factor.EMBEDDING_A if shape[-1] != n_in:
                return f"embedding LoRA for {shape[-1]} tokens, model has {n_in}"
        return None


def _parse_key(key: str) -> tuple[str, _Factor] | None:
    """``base_model.model.<module>.lora_A.weight`` → (``<module>``, A); None for other keys."""
    for factor in _Factor:
        if key.endswith(factor.value):
            return key[: -len(factor.value)].removeprefix("base_model.model."), factor
    return None
