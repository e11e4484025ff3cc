# SPDX-License-Identifier: Apache-2.0
"""Load a causal LM and its tokenizer for an ``EngineConfig``.

``config.model`` names a checkpoint directory, a GGUF file or a directory
holding one (converted once into a cached checkpoint by ``_gguf``), or a hub id
(from the local Hugging Face cache; downloaded only with ``download=True``).

Invariants: nothing is downloaded unless ``config.download`` is true;
third-party load failures are mapped to ``ModelLoadError`` subclasses
(``ModelNotFoundError``, ``NotCausalLMError``, ``GGUFError``, ...) with a
message that says what to do; the returned model is in eval mode on the
resolved device, unwrapped (the adapter manager wraps it as a PEFT model later,
if ever); a 4-bit model keeps its weight layout fixed, and an 8-bit one has
bitsandbytes' per-call cast notice silenced once (both workarounds: ``_compat``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import torch

from mp13_engine._cache import Progress, report
from mp13_engine._causal import check_causal
from mp13_engine._compat import (
    install_int8_cast_filter,
    install_kernels_notice_filter,
    install_peft_deprecation_filter,
    keep_4bit_layout,
)
from mp13_engine._config import EngineConfig
from mp13_engine._errors import (
    ConfigError,
    MissingDependencyError,
    ModelLoadError,
    ModelNotFoundError,
    NotCausalLMError,
)
from mp13_engine._gguf import cached_checkpoint, find_gguf
from mp13_engine._load_bar import weights_reported_to

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@attrs.define
class Loaded:
    """What ``load_model`` returns: the model, its tokenizer and the resolved placement."""

    model: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype


def resolve_device(name: str) -> torch.device:
    """``EngineConfig.device`` as a torch device that exists here (else ``ConfigError``)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        _check_gpus(
            f"EngineConfig.device={name!r}", [_cuda_index(name)], "use device='cpu' or 'auto'"
        )
    if name == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(
            "EngineConfig.device='mps' but MPS (Apple-silicon GPU) is not available here; use "
            "device='cpu' or 'auto'"
        )
    return torch.device(name)


def _cuda_index(place: str | int) -> int:
    """The GPU index of a device-map value or device name: ``3``, ``"cuda"``, ``"cuda:3"``."""
    return place if isinstance(place, int) else int(place.partition(":")[2] or 0)


def _check_gpus(what: str, indexes: list[int], fix: str) -> None:
    """``ConfigError`` unless every GPU index in ``indexes`` exists here.

    Without it torch fails deep inside loading ("Torch not compiled with CUDA
    enabled", an AssertionError; "invalid device ordinal") after reading the weights.
    """
    if not indexes:
        return
    if not torch.cuda.is_available():
        raise ConfigError(f"{what} names a GPU but CUDA is not available here; {fix}")
    count = torch.cuda.device_count()
    missing = sorted({i for i in indexes if i >= count})
    if missing:
        raise ConfigError(
            f"{what} names GPU {', '.join(map(str, missing))} but this machine has {count} "
            f"(cuda:0 to cuda:{count - 1}); {fix}"
        )


def check_device_map(device_map: Any, max_memory: dict[str, Any] | None = None) -> None:
    """A dict ``device_map`` and ``max_memory`` may name only GPUs that exist (a named map
    places by itself)."""
    if isinstance(device_map, dict):
        gpus = [
            _cuda_index(place)
            for place in device_map.values()
            if isinstance(place, int) or (isinstance(place, str) and place.startswith("cuda"))
        ]
        _check_gpus(
            f"EngineConfig.device_map={device_map!r}",
            gpus,
            "map modules to 'cpu' or an existing GPU, use device_map='auto', or drop device_map",
        )
    if max_memory is not None:
        # accelerate only prints "Device 0 is not available" and transformers then fails
        # with "Cannot access accelerator device" (which read as a bad weight file).
        _check_gpus(
            f"EngineConfig.max_memory={max_memory!r}",
            [int(key) for key in max_memory if key.isdigit()],
            "cap only 'cpu' here, or drop max_memory",
        )


def input_device(model: Any) -> torch.device:
    """Where a dispatched model takes its inputs: the device of its input embeddings.

    Weights offloaded by accelerate sit on the ``meta`` device and are brought to
    the execution device by hooks; inputs then go to the CPU, where they start.
    """
    try:
        device = model.get_input_embeddings().weight.device
    except (AttributeError, NotImplementedError):
        device = next(model.parameters()).device
    return torch.device("cpu") if device.type in ("meta", "disk") else device


def _looks_like_path(model: str) -> bool:
    # Hub ids are "name" or "org/name"; anything else is meant as a filesystem path.
    return model.startswith((".", "/", "~")) or "\\" in model or model.count("/") > 1


def _resolve_source(config: EngineConfig, progress: Progress | None) -> tuple[str, bool]:
    """The local checkpoint directory for ``config.model`` and whether it came from a GGUF."""
    path = Path(os.path.expanduser(config.model))
    if path.exists():
        gguf = find_gguf(path)
        if gguf is not None:
            return str(_from_gguf(gguf, config, progress)), True
        if path.is_dir():
            return _checkpoint_dir(path, config.model), False
        raise ModelNotFoundError(
            f"model path {config.model!r} is a file, but mp13 loads a model directory "
            f"(config.json, weights, tokenizer) or a GGUF file; {_instead_of_file(path)}"
        )
    if _looks_like_path(config.model) or config.model.lower().endswith(".gguf"):
        raise ModelNotFoundError(
            f"model path {config.model!r} does not exist (relative paths start from "
            f"{os.getcwd()!r}); give the directory that holds config.json and the weights, "
            "or a GGUF file"
        )
    return _hub_snapshot(config, progress), False


def _instead_of_file(path: Path) -> str:
    """What to give instead of a file that is neither a checkpoint folder nor a GGUF."""
    folder = path.parent
    if (folder / "config.json").is_file():
        return f"give the folder that holds it: {str(folder)!r}"
    if path.suffix.lower() == ".json":
        # Engine.load("engine.json"): an EngineConfig file, not a model.
        return (
            "for an EngineConfig file use Engine.load(EngineConfig.from_json(path)); for a "
            "model give its directory"
        )
    return "give the directory"


def _checkpoint_dir(path: Path, given: str) -> str:
    """``path`` when it holds a checkpoint's ``config.json``, else what the folder is instead.

    transformers' own error for a folder without one ("Should have a `model_type` key in
    its config.json") sends the user looking for a key in a file that is not there.
    """
    if (path / "config.json").is_file():
        return str(path)
    if (path / "adapter_config.json").is_file():
        raise ModelNotFoundError(
            f"model path {given!r} holds a LoRA adapter (adapter_config.json), not a model; "
            f"load its base model and then engine.adapters.load({given!r})"
        )
    try:
        inner = sorted(
            p.name
            for p in path.iterdir()
            if p.is_dir() and ((p / "config.json").is_file() or any(p.glob("*.gguf")))
        )
    except OSError:
        inner = []
    here = f" (here: {', '.join(str(path / name) for name in inner[:5])})" if inner else ""
    raise ModelNotFoundError(
        f"model path {given!r} is a folder without a model: no config.json (a Hugging Face "
        "checkpoint) and no .gguf file; give the folder that holds config.json, the weights "
        f"and the tokenizer, or a GGUF file{here}"
    )


def _from_gguf(file: Path, config: EngineConfig, progress: Progress | None) -> Path:
    # "auto" keeps the dequantized values exact; loading may cast them afterwards.
    dtype_name = "float32" if config.dtype == "auto" else config.dtype
    return cached_checkpoint(file, dtype_name, check_config=check_causal, progress=progress)


def _hub_snapshot(config: EngineConfig, progress: Progress | None) -> str:
    """A hub id's local snapshot: from the cache, else (``download=True``) downloaded now."""
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(config.model, local_files_only=True)
    except Exception as exc:
        named = _named_model_message(config.model)
        if named is not None:  # with download=True the hub would only answer "not found"
            raise ModelNotFoundError(named) from exc
        if not config.download:
            raise ModelNotFoundError(_not_cached_message(config.model)) from exc
    report(progress, "download", 0, None, f"downloading {config.model} from the Hugging Face hub")
    try:
        from huggingface_hub import HfApi

        files = HfApi().list_repo_files(config.model)
        path = snapshot_download(
            config.model, local_files_only=False, allow_patterns=_hub_patterns(config, files)
        )
    except Exception as exc:
        raise ModelNotFoundError(
            f"cannot download {config.model!r} from the Hugging Face hub: "
            f"{type(exc).__name__}: {exc}; check the id, the network (HF_ENDPOINT, proxies) "
            "and, for gated models, your access token (hf auth login or HF_TOKEN)"
        ) from exc
    report(progress, "ready", 1, 1, f"downloaded {config.model} into {path}")
    return path


def _hub_patterns(config: EngineConfig, files: list[str]) -> list[str]:
    """What to download of a hub repo: config, tokenizer, and one copy of the weights."""
    patterns = ["*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken", "tokenizer*"]
    if any(f.endswith(".safetensors") for f in files):
        patterns.append("*.safetensors")
    elif any(f.endswith(".bin") for f in files):
        patterns.append("*.bin")
    elif any(f.endswith(".gguf") for f in files):
        ggufs = sorted(f for f in files if f.endswith(".gguf"))
        raise ModelNotFoundError(
            f"hub repo {config.model!r} holds GGUF files only ({', '.join(ggufs[:4])}"
            f"{', ...' if len(ggufs) > 4 else ''}); download the one you want (e.g. `hf "
            f"download {config.model} {ggufs[0]}`) and load the file: Engine.load(path)"
        )
    if config.trust_remote_code:
        patterns.append("*.py")
    return patterns


def _named_model_message(model: str) -> str | None:
    """What to do when ``model`` is one of mp13's named models (None when it is not one).

    A named model is not a hub id: ``models.fetch`` gets it and returns a directory to load.
    """
    from mp13_engine._cache import models_cache_dir
    from mp13_engine.models._catalog import CATALOG
    from mp13_engine.models._fetch import entry_dir, is_complete

    entry = CATALOG.get(model.lower())
    if entry is None:
        return None
    name = entry.model.name
    root = models_cache_dir()
    fetched = (
        f"; it is fetched already, so Engine.load({str(entry_dir(entry, root))!r}) loads it"
        if is_complete(entry, root)
        else ""
    )
    return (
        f"{model!r} is one of mp13's named models, not a hub id: load the directory that "
        f"mp13_engine.models.fetch({name!r}) returns (it fetches the model once; later calls "
        f"return at once){fetched}"
    )


def _not_cached_message(model: str) -> str:
    return (
        f"model {model!r} is neither a local directory nor a hub id in the local Hugging Face "
        f"cache; to download it, pass EngineConfig(download=True) (mp13chat --download), "
        f"download it first (`hf download {model}`), or give a local path"
    )


def _quantization_config(config: EngineConfig, dtype: torch.dtype) -> Any:
    if config.quantization is None:
        return None
    from transformers import BitsAndBytesConfig

    if config.quantization == "4bit":
        return BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_compute_dtype=dtype, bnb_4bit_quant_type="nf4"
        )
    return BitsAndBytesConfig(load_in_8bit=True)


def check_bitsandbytes(config: EngineConfig, device: torch.device) -> None:
    """``MissingDependencyError`` now unless bitsandbytes can quantize on ``device``.

    transformers finds out only once it loads (after a GGUF file was converted or a
    download finished), and a bitsandbytes without a backend for this machine's
    devices surfaced as a RuntimeError that read like a corrupt weight file.
    ``device`` is where the layers will run (for a ``device_map``, the GPU when CUDA
    is available, else the CPU).
    """
    if config.quantization is None:
        return
    try:
        import bitsandbytes
    except ImportError as exc:
        raise MissingDependencyError(
            f"quantization={config.quantization!r} needs the bitsandbytes package ({exc}); "
            "install it (pip install bitsandbytes), or load with quantization=None"
        ) from exc
    # bitsandbytes lists the torch device types it has a backend for (transformers reads the
    # same attribute); releases before it existed had CUDA only.
    supported = set(getattr(bitsandbytes, "supported_torch_devices", None) or {"cuda"})
    if device.type not in supported:
        version = getattr(bitsandbytes, "__version__", "?")
        raise MissingDependencyError(
            f"quantization={config.quantization!r} on {device.type}: the installed "
            f"bitsandbytes {version} has no backend for it (only "
            f"{', '.join(sorted(supported))}); install a bitsandbytes that supports "
            f"{device.type} (0.50 runs 4-bit and 8-bit on the CPU), use a device it "
            "supports, or load with quantization=None"
        )


def load_model(config: EngineConfig, progress: Progress | None = None) -> Loaded:
    """Load model + tokenizer for ``config`` (runs on the caller's thread, before the worker).

    ``progress`` receives ``FetchProgress`` reports of the slow first-time steps
    (converting a GGUF file, downloading with ``download=True``) and of loading the
    weights (stage ``"load"``, in place of transformers' "Loading weights" bar).
    """
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    install_kernels_notice_filter()  # before PEFT imports bitsandbytes (_compat says why)
    install_peft_deprecation_filter()  # PEFT's use of a deprecated name, not the user's
    device = resolve_device(config.device)
    check_device_map(config.device_map, config.max_memory)
    mapped = config.device_map is not None
    on_cpu = not torch.cuda.is_available() if mapped else device.type == "cpu"
    # A device_map places the layers on the GPU when there is one (offloading some to the CPU).
    runs_on = torch.device("cpu") if on_cpu else torch.device("cuda") if mapped else device
    check_bitsandbytes(config, runs_on)
    source, from_gguf = _resolve_source(config, progress)
    common = {
        "local_files_only": config.local_files_only,
        "trust_remote_code": config.trust_remote_code,
    }
    try:
        hf_config = AutoConfig.from_pretrained(source, **common)
    except Exception as exc:
        raise ModelLoadError(
            f"cannot read the model config in {source}: {exc}; check that it holds a "
            "Hugging Face checkpoint (config.json)"
        ) from exc
    check_causal(hf_config, source)

    if config.dtype == "auto":
        # A converted GGUF is stored in float32 (exact); accelerators want half precision.
        dtype = torch.float32 if on_cpu else _accelerator_dtype() if from_gguf else None
        dtype = dtype or _checkpoint_dtype(hf_config)
    else:
        dtype = _DTYPES[config.dtype]
    kwargs: dict[str, Any] = {"dtype": dtype, **common}
    if config.attn_implementation is not None:
        kwargs["attn_implementation"] = config.attn_implementation
    quant = _quantization_config(config, dtype)
    if quant is not None:
        kwargs["quantization_config"] = quant
    if mapped:
        kwargs["device_map"] = config.device_map
        if config.max_memory is not None:
            # accelerate wants GPU indices as ints; JSON keys are strings.
            kwargs["max_memory"] = {
                int(k) if k.isdigit() else k: v for k, v in config.max_memory.items()
            }
    elif quant is not None:
        kwargs["device_map"] = {"": device}
    try:
        # Any, like Loaded.model: transformers' stubs reject PreTrainedModel.to(device).
        with weights_reported_to(progress):
            model: Any = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except ValueError as exc:
        if "Unrecognized configuration class" in str(exc):
            raise NotCausalLMError(
                f"{source} is not a causal language model: {exc}; use a decoder-only LM"
            ) from exc
        raise ModelLoadError(f"cannot load the model in {source}: {exc}") from exc
    except ImportError as exc:
        # bitsandbytes for quantization, flash-attn for flash_attention_2: the tree's error
        # for a missing optional package (still a ModelLoadError, and an ImportError).
        # transformers' own text ends in a full stop, which read ".; install it" joined.
        raise MissingDependencyError(
            f"loading {source} needs a missing package: {str(exc).rstrip('. ')}; install it "
            "and retry" + _without_it(config)
        ) from exc
    except OSError as exc:
        raise ModelNotFoundError(
            f"cannot read the weights in {source}: {exc}; check the directory is complete"
        ) from exc
    except (RuntimeError, SafetensorError) as exc:
        if isinstance(exc, torch.OutOfMemoryError):
            raise
        # A cut or corrupt weight file, or weights of another size than config.json says.
        raise ModelLoadError(
            f"cannot load the weights in {source}: {exc}; the weight files must be complete "
            "and come from the same checkpoint as its config.json"
        ) from exc
    if mapped:
        device = input_device(model)
    elif quant is None:
        model = model.to(device)
    model.eval()
    if config.quantization == "4bit":
        keep_4bit_layout(model)  # adapters may be loaded after generating (issue 12, fix 6)
    elif config.quantization == "8bit":
        install_int8_cast_filter()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **common)
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load the tokenizer in {source}: {exc}; the directory needs tokenizer files"
        ) from exc
    ordinary = len(tokenizer) - len(set(tokenizer.all_special_ids))
    if ordinary < 2:  # transformers builds an empty tokenizer when the files are missing
        raise ModelLoadError(
            f"the tokenizer in {source} has no vocabulary ({len(tokenizer)} token(s), special "
            "ones only): its files are missing (tokenizer.json, or tokenizer.model / vocab "
            "files); copy them from the model's repository"
        )
    if tokenizer.pad_token_id is None and tokenizer.eos_token is not None:
        # Left padding is masked out, so any valid id works; eos is the usual choice.
        tokenizer.pad_token = tokenizer.eos_token
    return Loaded(model=model, tokenizer=tokenizer, device=device, dtype=dtype)


def _without_it(config: EngineConfig) -> str:
    """How to load without the missing package, for the options that need one."""
    ways = []
    if config.quantization is not None:
        ways.append("quantization=None")
    if config.attn_implementation == "flash_attention_2":
        ways.append("attn_implementation='sdpa'")
    return f", or load with {' and '.join(ways)}" if ways else ""


def _accelerator_dtype() -> torch.dtype:
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def _checkpoint_dtype(hf_config: Any) -> torch.dtype:
    value = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str) and value in _DTYPES:
        return _DTYPES[value]
    return torch.bfloat16
