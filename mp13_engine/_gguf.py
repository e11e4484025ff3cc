# SPDX-License-Identifier: Apache-2.0
"""GGUF files: recognise them and convert each one once into a cached Hugging Face checkpoint.

Concept
    Users have GGUF files from other local runtimes (llama.cpp, Ollama, LM
    Studio). ``transformers`` reads one — config, tokenizer, chat template and
    weights — with ``from_pretrained(..., gguf_file=...)`` (it needs the ``gguf``
    package: ``pip install "mp13[gguf]"``) and dequantizes the weights, which
    takes tens of seconds even for a small model. mp13 therefore converts a GGUF
    file once into a plain Hugging Face directory under the GGUF cache
    (``_cache.gguf_cache_dir()``) and loads that directory, in seconds, on every
    later load. The engine then serves, trains and quantizes it like any other
    checkpoint.

Invariants
    * An entry is keyed by the file's identity (resolved path, size, mtime in
      ns) and the dtype it was dequantized to: a replaced or edited file is
      converted again, and the entries of its older versions are removed.
    * Entries appear atomically and concurrent converters of one file take
      turns (``_cache.entry_lock`` / ``_cache.publish``).
    * Every failure is a typed ``ModelLoadError``: ``GGUFError`` (not a GGUF,
      several GGUFs in one folder, an architecture transformers cannot read,
      weights in a quantization type the ``gguf`` package cannot dequantize, a
      LoRA adapter or other file that declares no model shape),
      ``MissingDependencyError`` (no ``gguf`` package), ``NotCausalLMError``.
    * Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mp13_engine._cache import Progress, entry_lock, gguf_cache_dir, publish, report, staging_dir
from mp13_engine._errors import GGUFError, MissingDependencyError, ModelLoadError

MAGIC = b"GGUF"
SUFFIX = ".gguf"
ENTRY_FILE = "mp13_gguf.json"  # written into every converted directory: where it came from
FORMAT = 1  # bump when the converted layout changes: old entries are then rebuilt

_log = logging.getLogger("mp13_engine.gguf")


def has_magic(path: Path) -> bool:
    """True when ``path`` is a readable file that starts with the GGUF magic bytes."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == MAGIC
    except OSError:
        return False


def find_gguf(path: Path) -> Path | None:
    """The GGUF file ``path`` names, or None when it names something else.

    A file is a GGUF when it starts with the GGUF magic; a ``.gguf`` file that
    does not is an error. A directory names its one GGUF file when it holds no
    Hugging Face checkpoint (``config.json``); several GGUF files are an error
    that lists them.
    """
    if path.is_file():
        if has_magic(path):
            return path
        if path.suffix.lower() == SUFFIX:
            raise GGUFError(
                f"{str(path)!r} is named like a GGUF file but is not one (it does not start "
                "with the GGUF magic bytes); the download may be incomplete or corrupt, so "
                "fetch the file again"
            )
        return None
    if not path.is_dir() or (path / "config.json").is_file():
        return None
    found = sorted(p for p in path.iterdir() if p.suffix.lower() == SUFFIX and p.is_file())
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise GGUFError(
            f"{str(path)!r} holds {len(found)} GGUF files ({names}); mp13 cannot tell which "
            f"one you mean, so give the file itself, e.g. Engine.load({str(found[0])!r})"
        )
    return find_gguf(found[0]) if found else None  # the file's own check (magic or error)


def require_gguf_package() -> None:
    """``MissingDependencyError`` unless the ``gguf`` package is importable."""
    if importlib.util.find_spec("gguf") is None:
        raise MissingDependencyError(
            'loading a GGUF file needs the "gguf" package, which is not installed; install it '
            'with pip install "mp13[gguf]" (or pip install gguf) and load again'
        )


def _open(file: Path) -> Any:
    """A ``GGUFReader`` of ``file`` (``GGUFError`` when the file cannot be parsed)."""
    require_gguf_package()
    from gguf import GGUFReader

    try:
        return GGUFReader(str(file), "r")
    except (ValueError, OSError, KeyError, IndexError) as exc:
        raise GGUFError(
            f"cannot read the GGUF file {str(file)!r}: {exc}; the file may be truncated or "
            "corrupt, so fetch it again"
        ) from exc


def architecture(file: Path) -> str:
    """The ``general.architecture`` the GGUF file declares ("" if it declares none)."""
    field = _open(file).fields.get("general.architecture")
    return "" if field is None else str(field.contents())


def is_adapter_file(file: Path) -> bool:
    """Whether ``file`` is a llama.cpp LoRA adapter (``general.type`` "adapter"), not a model.

    False when the ``gguf`` package is missing or the file cannot be read: the
    caller's own error then stands.
    """
    try:
        field = _open(file).fields.get("general.type")
    except (GGUFError, MissingDependencyError):
        return False
    return field is not None and str(field.contents()) == "adapter"


def _check_not_adapter(file: Path) -> None:
    """``GGUFError`` when ``file`` is a llama.cpp LoRA adapter (see ``_check_shape``)."""
    if is_adapter_file(file):
        raise GGUFError(
            f"{str(file)!r} is a LoRA adapter in llama.cpp's GGUF format, not a model, and mp13 "
            "cannot read adapters in that format; load the base model (Engine.load(path of its "
            "folder or GGUF file)), then the adapter's PEFT folder (adapter_config.json and "
            "adapter_model.safetensors) with engine.adapters.load(folder)"
        )


def _check_shape(file: Path, arch: str) -> None:
    """``GGUFError`` unless ``file`` declares its model's shape.

    transformers reads a GGUF file without the ``<arch>.embedding_length`` /
    ``<arch>.block_count`` keys (a LoRA adapter, a vocabulary) as a model of its
    config class's *default* size (Llama: 7B parameters) and allocates it: the
    process is killed for memory instead of failing.
    """
    fields = _open(file).fields
    missing = [k for k in (f"{arch}.embedding_length", f"{arch}.block_count") if k not in fields]
    if missing:
        raise GGUFError(
            f"the GGUF file {str(file)!r} declares no model shape ({', '.join(missing)} "
            "missing), so it holds no model transformers can build (a vocabulary, projector or "
            "adapter file?); give the model's own GGUF file"
        )


#: Quantization types to suggest when a file's own type cannot be dequantized.
_COMMON_TYPES = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0", "F16")


def check_tensor_types(file: Path) -> None:
    """``GGUFError`` unless the ``gguf`` package can dequantize every tensor type of ``file``.

    transformers dequantizes with ``gguf.quants.dequantize``, which has no code for
    some types (``Q8_1``, ``Q8_K``, ... depending on the version). Found here, before
    the slow conversion, the error names the types instead of failing midway with
    "not yet implemented". A type is tried on one zero block: the public way to ask.
    """
    types = {t.tensor_type for t in _open(file).tensors}
    import numpy as np
    from gguf import GGML_QUANT_SIZES
    from gguf.quants import dequantize

    unreadable = []
    for qtype in sorted(types, key=lambda t: t.name):
        _, size = GGML_QUANT_SIZES[qtype]  # bytes of one block
        try:
            dequantize(np.zeros((1, size), dtype=np.uint8), qtype)
        except NotImplementedError:
            unreadable.append(qtype.name)
    if unreadable:
        raise GGUFError(
            f"the GGUF file {str(file)!r} stores weights as {', '.join(unreadable)}, which the "
            f"installed gguf package ({_package_version('gguf')}) cannot dequantize, so "
            "transformers cannot read it; get the model quantized another way "
            f"({', '.join(_COMMON_TYPES)} all load), use its Hugging Face checkpoint, or try a "
            "newer gguf (pip install -U gguf)"
        )


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown version"


def _identity(file: Path, dtype_name: str) -> dict[str, Any]:
    """What makes an entry: the file (resolved path, size, mtime in ns), dtype and FORMAT."""
    resolved = file.resolve()
    stat = resolved.stat()
    return {
        "source": str(resolved),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "dtype": dtype_name,
        "format": FORMAT,
    }


def entry_key(file: Path, dtype_name: str) -> str:
    """The cache key of ``file`` dequantized to ``dtype_name``: its identity, hashed."""
    identity = "|".join(str(value) for value in _identity(file, dtype_name).values())
    digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", file.resolve().stem)[:60]
    return f"{stem}-{dtype_name}-{digest}"


def cached_checkpoint(
    file: Path,
    dtype_name: str,
    *,
    check_config: Callable[[Any, str], None] | None = None,
    progress: Progress | None = None,
    root: Path | None = None,
) -> Path:
    """The Hugging Face directory converted from GGUF ``file``: cached, or converted now.

    ``dtype_name`` is ``"float32"``, ``"bfloat16"`` or ``"float16"``: what the
    weights are dequantized to (and stored as). ``check_config(hf_config, source)``
    may refuse the model before the slow conversion (e.g. not a causal LM).
    ``progress`` receives ``"convert"`` reports. ``root`` defaults to the GGUF cache.
    """
    root = gguf_cache_dir() if root is None else root
    key = entry_key(file, dtype_name)
    final = root / key
    if (final / ENTRY_FILE).is_file():
        return final
    require_gguf_package()
    with entry_lock(root, key):
        if (final / ENTRY_FILE).is_file():  # another process converted it while we waited
            return final
        message = (
            f"converting {file.name} to a Hugging Face checkpoint in {dtype_name} (first load "
            f"only; later loads use the cache in {root})"
        )
        _log.info(message)
        report(progress, "convert", 0, 3, message)
        with staging_dir(root, key) as tmp:
            convert(file, tmp / "model", dtype_name, check_config=check_config, progress=progress)
            import transformers

            meta = {**_identity(file, dtype_name), "transformers": transformers.__version__}
            (tmp / "model" / ENTRY_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")
            publish(tmp / "model", final)
        _remove_older_versions(root, meta["source"], dtype_name, keep=final)
    report(progress, "convert", 3, 3, f"converted {file.name} into {final}")
    _log.info("converted %s into %s", file, final)
    return final


def convert(
    file: Path,
    dest: Path,
    dtype_name: str,
    *,
    check_config: Callable[[Any, str], None] | None = None,
    progress: Progress | None = None,
) -> None:
    """Dequantize GGUF ``file`` into a plain Hugging Face checkpoint directory ``dest``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    arch = architecture(file)  # MissingDependencyError first when gguf is not installed
    _check_not_adapter(file)
    check_tensor_types(file)
    source = str(file)
    try:
        hf_config = AutoConfig.from_pretrained(str(file.parent), gguf_file=str(file))
    except ImportError as exc:
        raise MissingDependencyError(
            f"reading {source!r} needs a package transformers could not import: {exc}; "
            'install the GGUF extra with pip install "mp13[gguf]"'
        ) from exc
    except (ValueError, KeyError, OSError) as exc:
        raise _read_error(file, arch, exc) from exc
    if check_config is not None:
        check_config(hf_config, source)
    _check_shape(file, arch)  # before building the model from it
    report(progress, "convert", 1, 3, f"dequantizing {file.name} (this takes a while)")
    kwargs: dict[str, Any] = {"gguf_file": str(file), "dtype": getattr(torch, dtype_name)}
    dense = _dense_quantization_config()
    if dense is not None:
        kwargs["quantization_config"] = dense
    try:
        model = AutoModelForCausalLM.from_pretrained(str(file.parent), **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=str(file))
    except ImportError as exc:
        raise MissingDependencyError(
            f"converting {source!r} needs a missing package: {exc}; install it and load again"
        ) from exc
    except (ValueError, KeyError, OSError, RuntimeError, NotImplementedError) as exc:
        raise _read_error(file, arch, exc) from exc
    _drop_quantization_marker(model)
    _add_end_of_turn_tokens(model, file)
    report(progress, "convert", 2, 3, f"saving the converted checkpoint of {file.name}")
    try:
        model.save_pretrained(str(dest))
        tokenizer.save_pretrained(str(dest))
    except (ValueError, OSError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise ModelLoadError(
            f"cannot save the converted checkpoint of {source!r} to {str(dest)!r}: {exc}; "
            "check the free disk space of the cache (set MP13_CACHE to move it)"
        ) from exc


def _dense_quantization_config() -> Any:
    """A ``GgufConfig`` asking for dense weights, on transformers versions that have one.

    Newer transformers can keep GGUF weights packed (when the ``kernels`` package
    offers a matmul); mp13 needs plain tensors to serve LoRA and to train.
    """
    try:
        from transformers.utils.quantization_config import GgufConfig
    except ImportError:
        return None
    return GgufConfig(dequantize=True)


def _drop_quantization_marker(model: Any) -> None:
    """Make the dequantized model a plain checkpoint (``save_pretrained`` refuses otherwise)."""
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    for config in (model.config, getattr(model, "generation_config", None)):
        if config is not None and hasattr(config, "quantization_config"):
            delattr(config, "quantization_config")


_END_KEYS = (
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
)


def _add_end_of_turn_tokens(model: Any, file: Path) -> None:
    """Stop generating at every end token the file names, not only at its ``eos``.

    llama.cpp records end-of-turn (``eot``) and end-of-message (``eom``) tokens
    beside ``eos`` (Llama 3 chat models end a turn with ``<|eot_id|>``);
    transformers reads only ``eos``, so a converted model would talk past the
    end of its turn.
    """
    from gguf import GGUFReader

    reader = GGUFReader(str(file), "r")
    ends = []
    for key in _END_KEYS:
        field = reader.fields.get(key)
        if field is not None:
            ends.append(int(field.contents()))
    generation = getattr(model, "generation_config", None)
    if generation is None or not ends:
        return
    current = generation.eos_token_id
    current = [] if current is None else [current] if isinstance(current, int) else list(current)
    merged = list(dict.fromkeys([*current, *ends]))
    generation.eos_token_id = merged[0] if len(merged) == 1 else merged


def _read_error(file: Path, arch: str, exc: BaseException) -> ModelLoadError:
    text = str(exc)
    if "not supported" in text or "Unrecognized" in text or "does not recognize" in text:
        return GGUFError(
            f"the GGUF file {str(file)!r} holds a model of architecture {arch or 'unknown'!r}, "
            f"which transformers cannot read from GGUF ({text}); supported: "
            f"{', '.join(_supported_architectures()) or 'see the transformers GGUF docs'}. "
            "Use the model's original Hugging Face checkpoint instead"
        )
    return GGUFError(
        f"cannot read the GGUF file {str(file)!r} ({arch or 'unknown architecture'}): {text}; "
        "check that the file is complete, or use the model's Hugging Face checkpoint"
    )


def _supported_architectures() -> list[str]:
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:
        return []
    return sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer"))


def _remove_older_versions(root: Path, source: str, dtype_name: str, keep: Path) -> None:
    """Drop entries converted from earlier versions of the same file (it was replaced)."""
    for entry in root.iterdir():
        if entry == keep or entry.name.startswith("."):
            continue
        try:
            meta = json.loads((entry / ENTRY_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if meta.get("source") == source and meta.get("dtype") == dtype_name:
            shutil.rmtree(entry, ignore_errors=True)
