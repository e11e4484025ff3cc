# SPDX-License-Identifier: Apache-2.0
"""``EngineConfig``: everything needed to load a model and run an engine.

A frozen attrs value. Every field is validated on construction; an invalid
value raises ``ConfigError`` naming the field and the allowed values, so a bad
JSON file or keyword argument fails before any model is loaded. The config
round-trips through JSON (``to_json`` / ``from_json``) via the engine's one
cattrs converter; unknown keys are an error, not silently ignored.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeGuard

import attrs

from mp13_engine._convert import converter, structure
from mp13_engine._errors import ConfigError, ConfigKeywordError
from mp13_toolbox import did_you_mean, strict_keywords

DEVICES_HELP = "'auto', 'cpu', 'cuda' or 'cuda:N', 'mps'"
DTYPES = ("auto", "float32", "bfloat16", "float16")
QUANTIZATIONS = (None, "4bit", "8bit")
ATTN_IMPLEMENTATIONS = (None, "eager", "sdpa", "flash_attention_2", "flex_attention")
MIXED_LORA = ("fused", "peft")
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
DeviceMap = str | dict[str, str | int] | None
#: Most ``batch_wait_ms`` an engine accepts.
MAX_BATCH_WAIT_MS = 60_000.0
MaxMemory = dict[str, str | int] | None
# An attrs validator: (instance, attribute, value) -> None, raising ConfigError.
Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def invalid(inst: Any, field: str, value: Any, use: str) -> ConfigError:
    """The error of every config class's field check: the class, field, value and the fix."""
    return ConfigError(f"{type(inst).__name__}.{field}={value!r} is not allowed; use {use}")


def rule(ok: Callable[[Any], bool], use: str) -> Validator:
    """A validator: ``ok(value)``, or the ``invalid`` error naming ``use``."""

    def check(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not ok(value):
            raise invalid(inst, attribute.name, value, use)

    return check


def one_of(allowed: tuple[Any, ...]) -> Validator:
    return rule(lambda v: v in allowed, f"one of {', '.join(repr(a) for a in allowed)}")


positive_int = rule(lambda v: is_int(v) and v >= 1, "an integer >= 1")
# Flags are checked, not read for truthiness: shuffle="no" would shuffle, and JSON's
# "false" would turn trust_remote_code on.
flag = rule(lambda v: isinstance(v, bool), "True or False (true or false in JSON)")


def is_int(value: Any) -> bool:
    """An ``int`` that is not a ``bool`` (``True`` is an int in Python, never a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> TypeGuard[float]:
    """An ``int`` or ``float`` that is not a ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_cuda(value: str) -> bool:
    return value == "cuda" or (value.startswith("cuda:") and value[5:].isdigit())


_device = rule(
    lambda v: isinstance(v, str) and (v in ("auto", "cpu", "mps") or _is_cuda(v)),
    f"one of {DEVICES_HELP}",
)
_non_negative = rule(lambda v: is_number(v) and math.isfinite(v) and v >= 0, "a finite number >= 0")
# inf is allowed: no limit, like None.
_opt_positive = rule(
    lambda v: v is None or (is_number(v) and v > 0),
    "a number of seconds > 0, or None for no limit",
)


def _is_memory_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and (k.isdigit() or k == "cpu") and isinstance(v, (str, int))
        for k, v in value.items()
    )


_max_memory = rule(
    lambda v: v is None or _is_memory_map(v),
    'a dict of GPU index (as a string) or \'cpu\' -> size, e.g. {"0": "20GiB", "cpu": "64GiB"}',
)
_model = rule(
    lambda v: isinstance(v, str) and bool(v),
    "a local model directory, a GGUF file (or a directory holding one), or a hub id (in the "
    "local Hugging Face cache, or with download=True)",
)


def optional_str(what: str) -> Validator:
    return rule(lambda v: v is None or isinstance(v, str), f"{what}, or None")


def _collect_wait(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    _non_negative(inst, attribute, value)
    # The idle worker sleeps this long for company; far beyond a minute is a mistake, and
    # past the platform's time_t a sleep cannot even be asked for (the worker would die).
    if value > MAX_BATCH_WAIT_MS:
        raise ConfigError(
            f"EngineConfig.{attribute.name}={value!r} is not allowed; use at most "
            f"{MAX_BATCH_WAIT_MS:g} ms (a few ms lets requests sent together share their "
            "first step)"
        )


# Other spellings of the dtypes (torch's, mixed precision's); hinted at, not accepted, so a
# config file keeps one spelling.
_DTYPE_SPELLINGS = {
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
}


def _dtype(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, str) and value in DTYPES:
        return
    # torch.float16 prints as "torch.float16"; torch is not imported to recognise it.
    name = str(value).removeprefix("torch.").lower()
    meant = _DTYPE_SPELLINGS.get(name, name if name in DTYPES else None)
    hint = f" (for {value!r} write {meant!r})" if meant else did_you_mean(name, DTYPES)
    raise ConfigError(
        f"{type(inst).__name__}.{attribute.name}={value!r} is not allowed; use one of "
        f"{', '.join(repr(d) for d in DTYPES)}{hint}"
    )


def _device_map(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None or value in DEVICE_MAPS:
        return
    if isinstance(value, dict) and value:
        bad = {
            k: v
            for k, v in value.items()
            if not isinstance(k, str)
            or not (
                (is_int(v) and v >= 0)
                or (isinstance(v, str) and (v in ("cpu", "disk") or _is_cuda(v)))
            )
        }
        if not bad:
            return
        raise ConfigError(
            f"EngineConfig.device_map entries {bad} are not allowed; map module names "
            "(\"\" for the whole model) to a GPU index, 'cuda:N', 'cpu' or 'disk'"
        )
    one_device = ""
    if isinstance(value, str) and (value in ("cpu", "mps") or _is_cuda(value)):
        one_device = f" (for the whole model on one device: device={value!r}, no device_map)"
    raise ConfigError(
        f"EngineConfig.device_map={value!r} is not allowed; use None, one of "
        f"{', '.join(repr(d) for d in DEVICE_MAPS)}, or a dict of module name -> device"
        + one_device
    )


def path_str(value: Any) -> Any:
    """A path as ``str`` (``os.PathLike`` -> ``os.fspath``); anything else, None included, as it
    is, for the field's validator to judge."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


@strict_keywords(ConfigKeywordError)
@attrs.frozen(kw_only=True)
class EngineConfig:
    """How to load and run one engine.

    ``model``: a local Hugging Face checkpoint directory, a GGUF file or a
    directory holding one GGUF file (converted once into a cached checkpoint,
    see ``mp13_engine._gguf``; needs ``pip install "mp13[gguf]"``), or a hub id.
    ``download``: False (the default) never touches the network — a hub id must
    already be in the local Hugging Face cache; True fetches a hub id that is
    not cached yet, with huggingface_hub's progress bars.
    ``device``: ``auto`` picks CUDA when present, else CPU. ``dtype``: ``auto``
    uses float32 on CPU and the checkpoint's dtype on accelerators.
    ``quantization``: ``None``, ``"4bit"`` (bitsandbytes NF4, no double
    quantization, computing in ``dtype``) or ``"8bit"`` (LLM.int8); the output
    head and embeddings stay unquantized. Checked on the CPU only (README,
    *Quantization*): loading, serving, mixed adapters and QLoRA training.
    ``attn_implementation``: passed to transformers (``"eager"``, ``"sdpa"``,
    ``"flash_attention_2"``, ``"flex_attention"``); ``None`` lets it choose.
    ``max_batch_size``: most requests decoding at once (more wait in the queue
    and join as rows finish). ``batch_wait_ms``: while the engine is idle, how
    long it waits after a request arrives for others to join its first step
    (requests sent "at once" are then prefilled as one batch; at most 60 000
    ms); a busy engine admits arrivals at its next step. Numbers must be
    finite, and no field converts a value of another type (``"false"`` is not
    ``False``). ``prefill_chunk_tokens``: most prompt
    tokens (padding included) one step computes, so a long prompt is prefilled
    over several steps while running requests keep decoding; smaller keeps
    their token rate steadier, larger prefills faster. ``packed_steps``:
    compute a step's prompt chunks and running rows in one forward when they
    share an adapter (the model's weights are read once; off: one forward per
    batch, for comparison or a model that misbehaves packed). ``prefix_cache_mb``:
    memory for the keys and values of prompts already computed, reused by
    later prompts that start with the same tokens and adapters (the earlier
    turns of a conversation, a shared system prompt), least recently used
    first out; 0 turns it off. ``request_timeout_s``: the default deadline of
    a request (``Request.timeout_s`` overrides it; None: none), after which
    it ends ``ERROR``. ``slow_step_s``: a step running longer than this is
    counted in ``metrics().slow_steps`` and logged (None: 25 times the usual
    time of that kind of work, at least 2 s, and 30 s the first time it runs).
    ``metrics_window``: how many recent requests
    ``engine.metrics()`` aggregates. ``max_queue``: most queued requests before
    new ones are refused: they end ``ERROR`` at once, saying the queue is full
    (nothing raises; requests sent together, as by ``generate_many``, are
    queued or refused as one). ``tool_format``: tool-call wire format, ``None`` =
    detect from the chat template. ``default_max_new_tokens``: used when a
    request leaves ``max_new_tokens`` unset. ``adapters_dir``: where
    ``adapters.load`` finds an adapter given by a short name and where training
    saves one (``adapters_dir/<name>``; ``None``: training saves under
    ``./adapters`` and ``adapters.load`` takes paths only).
    ``trust_remote_code``: run the model repository's own Python code
    (transformers' flag of that name; only for models you trust).
    ``mixed_lora``: how a step applies its rows' LoRA adapters: ``"fused"``
    (default) concatenates the step's adapters per layer and applies them in
    two matmuls (``_fused_lora``),
    falling back to PEFT where it cannot; ``"peft"`` always uses PEFT's
    per-adapter loop.

    ``device_map``: spread the model over several devices (or offload part of
    it to the CPU) with accelerate: ``"auto"``, ``"balanced"``,
    ``"balanced_low_0"``, ``"sequential"`` or a dict of module name -> GPU
    index / ``"cuda:N"`` / ``"cpu"`` / ``"disk"``; ``max_memory`` caps what a
    named map puts on each device (``{"0": "20GiB", "cpu": "64GiB"}``). With a
    device map, ``device`` stays ``"auto"`` and requests go to the device of
    the model's input embeddings.
    """

    model: str = attrs.field(converter=path_str, validator=_model)
    device: str = attrs.field(default="auto", validator=_device)
    dtype: str = attrs.field(default="auto", validator=_dtype)
    quantization: str | None = attrs.field(default=None, validator=one_of(QUANTIZATIONS))
    attn_implementation: str | None = attrs.field(
        default=None, validator=one_of(ATTN_IMPLEMENTATIONS)
    )
    max_batch_size: int = attrs.field(default=8, validator=positive_int)
    batch_wait_ms: float = attrs.field(default=2.0, validator=_collect_wait)
    prefill_chunk_tokens: int = attrs.field(default=512, validator=positive_int)
    packed_steps: bool = attrs.field(default=True, validator=flag)
    prefix_cache_mb: float = attrs.field(default=256.0, validator=_non_negative)
    request_timeout_s: float | None = attrs.field(default=None, validator=_opt_positive)
    slow_step_s: float | None = attrs.field(default=None, validator=_opt_positive)
    metrics_window: int = attrs.field(default=256, validator=positive_int)
    max_queue: int = attrs.field(default=4096, validator=positive_int)
    default_max_new_tokens: int = attrs.field(default=256, validator=positive_int)
    tool_format: str | None = attrs.field(default=None, validator=optional_str("a format name"))
    adapters_dir: str | None = attrs.field(
        default=None, converter=path_str, validator=optional_str("a directory path")
    )
    device_map: DeviceMap = attrs.field(default=None, validator=_device_map)
    max_memory: MaxMemory = attrs.field(default=None, validator=_max_memory)
    mixed_lora: str = attrs.field(default="fused", validator=one_of(MIXED_LORA))
    trust_remote_code: bool = attrs.field(default=False, validator=flag)
    download: bool = attrs.field(default=False, validator=flag)

    @property
    def local_files_only(self) -> bool:
        """True unless ``download`` allows fetching from the hub (what transformers calls it)."""
        return not self.download

    def __attrs_post_init__(self) -> None:
        if self.device_map is not None and self.device != "auto":
            raise ConfigError(
                f"EngineConfig sets both device={self.device!r} and device_map="
                f"{self.device_map!r}; a device map places the model itself, so leave device "
                "at 'auto' (or drop device_map to put the whole model on one device)"
            )
        if self.max_memory is not None and self.device_map is None:
            raise ConfigError(
                "EngineConfig.max_memory only applies with a device_map; set "
                "device_map='auto' as well, or drop max_memory"
            )

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Every field's name, in declaration order (what ``from_dict`` accepts)."""
        return tuple(a.name for a in attrs.fields(cls))

    @classmethod
    def _check_names(cls, names: Iterable[str]) -> None:
        known = cls.field_names()
        unknown = sorted(set(names) - set(known))
        if unknown:
            # A ConfigKeywordError, as EngineConfig(...) raises for the same misspelt name.
            raise ConfigKeywordError(
                f"unknown EngineConfig field(s) "
                f"{', '.join(f'{n}{did_you_mean(str(n), known)}' for n in unknown)}; "
                f"known fields: {', '.join(known)}"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineConfig:
        """Build from a plain dict; unknown keys raise ``ConfigError`` listing the known ones."""
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"EngineConfig.from_dict takes a dict of config fields, not {type(data).__name__}"
            )
        cls._check_names(data)
        if "model" not in data:
            raise ConfigError(
                "EngineConfig.model is required: a model directory, a GGUF file or a hub id"
            )
        return structure(dict(data), cls)

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain JSON values; ``from_dict`` of it gives an equal config."""
        data: dict[str, Any] = converter.unstructure(self)
        return data

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> EngineConfig:
        """Load from a JSON file holding one object of config fields."""
        p = Path(path)
        model = _model_not_config(p)
        if model is not None:
            raise ConfigError(model)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {p} does not exist; check the path") from exc
        except json.JSONDecodeError as exc:
            raise ConfigError(f"config file {p} is not valid JSON: {exc}; fix the file") from exc
        except (OSError, UnicodeDecodeError) as exc:  # a folder, no permission, not text
            raise ConfigError(
                f"cannot read config file {p} ({exc.__class__.__name__}: {exc}); give a "
                "readable JSON file"
            ) from exc
        if not isinstance(data, dict):
            raise ConfigError(f"config file {p} must hold a JSON object of EngineConfig fields")
        if "model_type" in data and "model" not in data:  # a checkpoint's own config.json
            what = f"{p} is a model's config.json"
            raise ConfigError(_LOAD_MODEL.format(what=what, path=str(p.parent)))
        return cls.from_dict(data)

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The JSON text of this config; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if path is not None:
            try:
                Path(path).write_text(text + "\n", encoding="utf-8")
            except OSError as exc:
                raise ConfigError(
                    f"cannot write config file {path} ({exc.__class__.__name__}: {exc}); "
                    "check that its folder exists and can be written"
                ) from exc
        return text

    def replace(self, **changes: Any) -> EngineConfig:
        """A copy with ``changes``; unknown names raise ``ConfigError`` as in ``from_dict``."""
        self._check_names(changes)
        return attrs.evolve(self, **changes)


_LOAD_MODEL = (
    "{what}, not an EngineConfig file: load the model with Engine.load({path!r}), or "
    "Engine.load(EngineConfig(model={path!r}, ...)) to set other fields"
)


def _model_not_config(path: Path) -> str | None:
    """The error for a model (folder or GGUF file) given to ``from_json``; None otherwise."""
    if path.is_dir() and (path / "config.json").is_file():
        return _LOAD_MODEL.format(what=f"{path} is a model folder", path=str(path))
    if path.is_file() and path.suffix.lower() == ".gguf":
        return _LOAD_MODEL.format(what=f"{path} is a GGUF model file", path=str(path))
    return None
