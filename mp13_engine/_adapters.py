# SPDX-License-Identifier: Apache-2.0
"""Adapters: many LoRA adapters on one loaded base model, served in one batch.

Concept
    The engine's base model is wrapped **once** as a PEFT ``PeftModel`` when the
    first adapter is loaded (or trained). Every adapter then lives side by side
    inside that wrapper under its own PEFT name, and rows with different
    adapters share ONE forward pass: by default through the fused path of
    :mod:`mp13_engine._fused_lora` (the wave's adapters concatenated per layer,
    :meth:`AdapterManager._fused_plan_on_worker`), else through PEFT's own
    per-row ``adapter_names``. Global adapter state (``set_adapter``) is never
    switched to serve a request.

Semantics of several adapters on one request (``Request.adapters=["a", "b"]``)
    The request runs on the *sum* of the adapters' weight deltas, exactly as if
    both adapters were active at once in PEFT (``base(x) + Δa(x) + Δb(x)``).
    The combination is built with PEFT ``add_weighted_adapter(...,
    combination_type="cat")`` (exact, rank = sum of ranks), with weight 1.0 per
    adapter unless :meth:`AdapterManager.combine` was given other weights, and
    is cached per set of names (order does not matter). Unloading or
    retraining a member drops the cached combinations that use it: when its job
    ends (done, cancelled or failed after changing its weights), so the next
    request on the combination is built from the weights the member has then.
    While a job trains a member, a combination keeps the member's weights of
    when it was built (a rebuild at every step would end the requests running on
    it); the member alone serves its weights as trained so far.

Seams
    The manager is the one place that knows the engine's attributes (the
    :class:`EngineSeam` it is built with). Training gets a
    :class:`~mp13_engine._training._host.TrainingHost` from
    :meth:`AdapterManager.training_host` and nothing else. What PEFT cannot do
    through its API (undoing a failed wrap, re-pointing a stale active adapter)
    is in :mod:`mp13_engine._compat`. What an adapter must pass before the model
    is touched is in :mod:`mp13_engine._adapter_checks` (its name, config, layers)
    and :mod:`mp13_engine._adapter_files` (its files, what they fit).

Invariants
    * All model mutation (wrapping, loading, deleting, combining, training)
      runs on the engine's worker thread, through ``engine._run_on_worker``;
      :meth:`AdapterManager._resolve_for_wave` and the ``_..._on_worker``
      helpers are called *on* the worker and never hop threads.
    * ``list()`` may be called from any thread: the registry is read under a
      lock and ``AdapterInfo`` values are immutable.
    * Every call made through :meth:`AdapterManager._run` says what it changed of the
      weights (``engine._note_change``, a ``WeightsChange``), so the prefix cache
      drops only the blocks those weights computed: adding, deleting or retraining an
      adapter is a change of that adapter (and of the combinations holding it); the
      base model's blocks stay, since PEFT's LoRA layers compute a base row exactly
      as the unwrapped layer does (checked bit for bit, fused and PEFT's own path,
      ``tests/engine/test_prefix_keep.py``). An adapter with weights outside its LoRA
      factors (``modules_to_save``, trainable tokens) swaps base modules for
      wrappers: loading or deleting one counts as a change of the base model.
    * Adapter directories are plain PEFT format both ways; mp13 adds one
      metadata file (``mp13_adapter.json``) that plain PEFT ignores.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import attrs

from mp13_engine._adapter_checks import (
    OUTSIDE_FACTORS,
    adapter_folder,
    check_combinable,
    check_name,
    check_no_token_clash,
    name_from_folder,
    read_lora_config,
    unknown_adapter,
)
from mp13_engine._adapter_files import (
    base_model_name,
    check_compatible,
    check_shares_no_base_weights,
    check_wrappable,
    holds_adapter,
    instead_of_adapter,
    recorded_base,
)
from mp13_engine._adapter_save import finish_cut_short_save, write_adapter_dir
from mp13_engine._changes import NOTHING, WeightsChange
from mp13_engine._compat import (
    is_peft_model,
    lend_originals_to_other_adapters,
    peft_base_model,
    repoint_active_adapter,
    undo_failed_wrap,
)
from mp13_engine._config import is_number
from mp13_engine._errors import AdapterError, RequestError, TrainingError
from mp13_engine._request_fields import check_request_field
from mp13_engine._types import BASE_ADAPTER, StrEnum, adapter_names, as_tuple

if TYPE_CHECKING:  # torch-free import of the package: these modules need torch
    from mp13_engine._config import EngineConfig
    from mp13_engine._fused_lora import FusedLora, FusedPlan
    from mp13_engine._scheduler import Job
    from mp13_engine._state import EngineState
    from mp13_engine._training._host import TrainingHost

_COMBO_PREFIX = "__combo__"
_TRIAL_PREFIX = "__replacing__"  # a replacement on trial (names never start with "__")
T = TypeVar("T")


class AdapterSource(StrEnum):
    """Where a loaded adapter came from (``str(source)`` is its value, ``"loaded"``)."""

    LOADED = "loaded"  # engine.adapters.load
    TRAINED = "trained"  # engine.train (also when it trained a loaded adapter further)


@attrs.frozen(kw_only=True)
class AdapterInfo:
    """What the engine knows about one loaded adapter."""

    name: str
    # Directory it was loaded from / last saved to; None if never on disk, or if another
    # adapter was since saved over that directory.
    path: str | None
    rank: int
    alpha: float
    targets: tuple[str, ...] = attrs.field(converter=as_tuple)
    # Base model recorded by the adapter (PEFT's base_model_name_or_path): for a model loaded
    # from a GGUF file or the hub, the file's path or the hub id, never a cache's folder.
    base_model: str | None
    source: AdapterSource = AdapterSource.LOADED


@attrs.define
class _AdaptersState:
    """Registry of loaded adapters; mutated on the worker, read from any thread under ``lock``."""

    infos: dict[str, AdapterInfo] = attrs.field(factory=dict)
    defaults: tuple[str, ...] = ()
    weights: dict[frozenset[str], dict[str, float]] = attrs.field(factory=dict)
    combos: dict[frozenset[str], str] = attrs.field(factory=dict)
    # Names a training job is training (claimed at its setup, released when it ends): loading,
    # replacing or unloading them would pull the weights from under the job.
    training: set[str] = attrs.field(factory=set)
    # Re-entrant: error helpers read the registry while a caller holds the lock.
    lock: threading.RLock = attrs.field(factory=threading.RLock)


def _targets_of(config: Any) -> tuple[str, ...]:
    targets = config.target_modules
    if targets is None:
        return ()
    if isinstance(targets, str):
        return (targets,)
    # PEFT expands "all-linear" to full module paths; the leaf names are what users recognise.
    return tuple(sorted({t.rsplit(".", 1)[-1] for t in targets}))


def _info_from_config(
    name: str, path: str | None, config: Any, source: AdapterSource
) -> AdapterInfo:
    return AdapterInfo(
        name=name,
        path=path,
        rank=int(config.r),
        alpha=float(config.lora_alpha),
        targets=_targets_of(config),
        base_model=recorded_base(config.base_model_name_or_path),  # not a cache's folder
        source=source,
    )


class EngineSeam(Protocol):
    """What the manager uses of its engine (``mp13_engine._engine`` documents these seams)."""

    config: EngineConfig
    _state: EngineState

    def _run_on_worker(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    def _note_change(self, change: WeightsChange) -> None: ...

    def _submit_job(self, job: Job) -> None: ...


class AdapterManager:
    """``engine.adapters``: load, unload, list, save and pick default LoRA adapters.

    Created by the engine as ``AdapterManager(engine)`` (see :class:`EngineSeam`).
    """

    def __init__(self, engine: EngineSeam) -> None:
        self._engine = engine
        self._state = _AdaptersState()
        self._fused: FusedLora | None = None  # made on the first wave that uses an adapter
        # modules_to_save and trainable-tokens wrappers that serve the other adapters' rows
        # with their original module.
        self._lending: weakref.WeakSet[Any] = weakref.WeakSet()

    # ----- engine access (the one place that knows the engine's attribute names)
    def _model(self) -> Any:
        return self._engine._state.model

    def _set_model(self, model: Any) -> None:
        self._engine._state.model = model

    def _base_model(self) -> Any:
        return peft_base_model(self._model())

    def _adapters_dir(self) -> Path | None:
        value = self._engine.config.adapters_dir
        return Path(value).expanduser() if value else None

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the worker as a call that says what it changes (see the invariants)."""

        # Named as ``fn``: the worker times each call by its name (``_watchdog``), and a
        # load must not be judged by how long an unload usually takes.
        @functools.wraps(fn)
        def saying(*call_args: Any) -> T:
            # Says "nothing" first: the _on_worker helpers that change weights each add theirs.
            self._engine._note_change(NOTHING)
            return fn(*call_args)

        result: T = self._engine._run_on_worker(saying, *args)
        return result

    def _config_of(self, name: str) -> Any:
        """*worker*: adapter ``name``'s PEFT config in the model, or None."""
        return getattr(self._model(), "peft_config", {}).get(name)

    def _changed(self, name: str, config: Any) -> None:
        """*worker*: adapter ``name`` (PEFT ``config``) is added, deleted or retrained."""
        outside = any(getattr(config, setting, None) for setting in OUTSIDE_FACTORS)
        self._engine._note_change(WeightsChange(base=outside, adapters=frozenset((name,))))

    # ----- public API (any thread)
    def resolve_path(self, path: str | os.PathLike[str]) -> Path:
        """The adapter directory ``path`` names: itself, or a short name under ``adapters_dir``."""
        candidate = adapter_folder(path).expanduser()
        if _holds_config(candidate):
            return candidate.resolve()
        base = self._adapters_dir()
        where = ""
        if base is not None and not candidate.is_absolute():
            under = base / candidate
            if _holds_config(under):
                return under.resolve()
            where = f" or under adapters_dir {str(base)!r}"
        raise AdapterError(
            f"No PEFT adapter directory at {str(path)!r}{where} (a directory with "
            "adapter_config.json). Give the path of a directory saved by PEFT or by "
            "engine.adapters.save, or set EngineConfig.adapters_dir for short names."
            + instead_of_adapter(candidate)
        )

    def load(
        self, path: str | os.PathLike[str], name: str | None = None, *, replace: bool = False
    ) -> AdapterInfo:
        """Load a PEFT LoRA adapter directory under ``name`` (default: the directory name).

        Checks that the adapter fits the base model (module names and shapes)
        before touching the model. ``replace=True`` swaps out an adapter of the
        same name, keeping its place in the defaults and its combine weights (a
        replacement PEFT refuses leaves the old adapter as it was); otherwise a
        duplicate name is an error. Refused before the model is touched: other PEFT
        types than LoRA, DoRA, and adapters whose loading would change the shared base
        model (``check_shares_no_base_weights``).
        """
        if not isinstance(replace, bool):  # "no" would replace: it is truthy
            raise AdapterError(f"load() replace is True or False, not {replace!r}")
        if name is not None:
            check_name(name)  # before touching the disk: a bad name is a bad call
        directory = self.resolve_path(path)
        if name is None:
            name = name_from_folder(directory)
        return self._run(self._load_on_worker, directory, name, replace)

    def unload(self, name: str) -> None:
        """Remove adapter ``name`` (on the worker, between steps).

        A request running on it ends ``ERROR`` (its cached keys and values came from
        the old weights), and queued requests that name it end ``ERROR`` when they
        are admitted; the others go on. It is also dropped from the defaults
        (``set_default``), so requests with ``adapters=None`` no longer use it.
        """
        self.get(name)  # an unknown name (or not a name at all) fails here, on the caller
        self._run(self._unload_on_worker, name)

    def list(self) -> list[AdapterInfo]:
        """Loaded adapters, sorted by name."""
        with self._state.lock:
            return [self._state.infos[n] for n in sorted(self._state.infos)]

    def get(self, name: str) -> AdapterInfo:
        """The info of adapter ``name``; AdapterError if it is not loaded."""
        with self._state.lock:
            info = self._state.infos.get(name) if isinstance(name, str) else None
        if info is None:
            raise self._unknown(name)
        return info

    def __contains__(self, name: object) -> bool:
        with self._state.lock:
            return isinstance(name, str) and name in self._state.infos

    def save(self, name: str, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Save adapter ``name`` to directory ``path`` in plain PEFT format (+ mp13 metadata).

        A folder that already holds another saved adapter is refused unless
        ``overwrite=True`` (its weights would be lost); the adapter's own folder (the
        one it was loaded from or last saved to) is written over freely.
        """
        target = adapter_folder(path).expanduser().resolve()
        if not isinstance(overwrite, bool):
            raise AdapterError(f"save() overwrite is True or False, not {overwrite!r}")
        if target.exists() and not target.is_dir():
            raise AdapterError(
                f"cannot save adapter {name!r} to {str(target)!r}: it is a file; "
                "give a folder (new, or one to write the adapter's files into)"
            )
        return self._run(self._save_checked_on_worker, name, target, overwrite)

    def set_default(self, names: str | Sequence[str] | None) -> None:
        """Adapters used when ``Request.adapters`` is None (``[]``/None = base model)."""
        try:
            check_request_field("adapters", names)  # the one rule for a list of adapter names
        except RequestError as exc:
            raise AdapterError(
                f"set_default takes an adapter name or a list of names ([] or None for the "
                f"base model), not {names!r}"
            ) from exc
        wanted = adapter_names(names)
        with self._state.lock:
            self._check_loaded(wanted)
            self._state.defaults = wanted

    @property
    def defaults(self) -> tuple[str, ...]:
        """The current default adapter names (empty = base model)."""
        with self._state.lock:
            return self._state.defaults

    def combine(self, names: Sequence[str], weights: Sequence[float] | None = None) -> None:
        """Set the weights used when a request names exactly these adapters together.

        Default weights are 1.0 each (the deltas add up). Takes effect at the next
        step, rebuilding a cached combination of the same set: a request running on
        that combination ends ``ERROR`` (its cached keys came from the old weights).
        """
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise AdapterError(f"combine() takes a list of adapter names, not {names!r}")
        if weights is not None and not isinstance(weights, Sequence):
            raise AdapterError(f"combine() weights are a list of numbers, not {weights!r}")
        names = tuple(names)
        weights = tuple(1.0 for _ in names) if weights is None else tuple(weights)
        if not all(is_number(w) and math.isfinite(w) for w in weights):
            raise AdapterError(f"combine() weights are finite numbers, got {list(weights)}")
        if len(names) < 2 or len(weights) != len(names):
            raise AdapterError(
                "combine() needs at least two adapter names and one weight per name; "
                f"got names={list(names)} weights={list(weights)}."
            )
        repeated = sorted({n for n in names if names.count(n) > 1}, key=str)
        if repeated:
            # dict(zip(...)) would keep the last weight of a repeated name and store weights
            # for a set no request can name, so the call would change nothing, silently.
            raise AdapterError(
                f"combine() takes each adapter once, but {list(names)} repeats {repeated}. "
                "Name each adapter once, with one weight each."
            )
        self._run(self._set_weights_on_worker, dict(zip(names, weights, strict=True)))

    def training_host(self) -> TrainingHost:
        """What a training job may use of this engine (``engine.train`` hands it to the job)."""
        from mp13_engine._training._host import TrainingHost

        state = self._engine._state
        return TrainingHost(
            tokenizer=state.tokens.tokenizer,
            pad_id=state.pad_id,
            # TokenizerGuard serialises the engine's tokenizer calls with this (re-entrant) lock;
            # training renders with the tokenizer directly, so it takes the same lock.
            tokenizer_lock=state.tokens.lock,
            prepare=state.formatter.prepare,
            encode_chat=state.tokens.encode_chat,
            adapters_dir=self._adapters_dir(),
            run_on_worker=self._run,
            note_change=self._engine._note_change,
            submit_job=self._engine._submit_job,
            model=self._model,
            base_model=self._base_model,
            is_loaded=self.__contains__,
            claim=self._claim_for_training_on_worker,
            release=self._release_training_on_worker,
            add_adapter=self._add_for_training_on_worker,
            discard_adapter=self._discard_on_worker,
            install_adapter=self._install_trained_on_worker,
        )

    # ----- worker side
    def _unknown(self, name: str) -> AdapterError:
        with self._state.lock:
            known = sorted(self._state.infos)
            training = isinstance(name, str) and name in self._state.training
        return unknown_adapter(name, known, training=training)

    def _check_loaded(self, names: Iterable[str]) -> None:
        with self._state.lock:
            missing = [n for n in names if n not in self._state.infos]
        if missing:
            raise self._unknown(missing[0])

    def _resolve_for_wave(self, adapters: Sequence[str] | None) -> str:
        """PEFT adapter name for a row whose request asked for ``adapters``. Worker only.

        ``None`` → the defaults; ``()``/``["__base__"]`` → ``"__base__"``; one
        name → that adapter; several → their cached combination. Unknown names
        raise :class:`AdapterError` (the engine fails just that request).
        """
        names = adapter_names(adapters, self.defaults)
        if not names:
            return BASE_ADAPTER
        self._check_loaded(names)
        if len(names) == 1:
            return names[0]
        return self._combination_on_worker(frozenset(names))

    def _fused_plan_on_worker(self, row_names: Sequence[str]) -> FusedPlan | None:
        """The fused LoRA plan of a wave (one PEFT name per row); None = use PEFT's loop."""
        if self._engine.config.mixed_lora != "fused":
            return None
        model = self._model()  # a PeftModel: the one caller (_forward) checked, on this thread
        if self._fused is None:
            from mp13_engine._fused_lora import FusedLora

            self._fused = FusedLora()
        return self._fused.plan(model, row_names)

    def _combination_on_worker(self, key: frozenset[str]) -> str:
        existing = self._state.combos.get(key)
        if existing is not None:
            return existing
        order = sorted(key)
        weights = self._state.weights.get(key, {})
        combo = _COMBO_PREFIX + "+".join(order)
        check_combinable(order, self._model().peft_config)
        self._changed(combo, None)  # members with weights outside their factors were refused
        try:
            self._model().add_weighted_adapter(
                adapters=order,
                weights=[float(weights.get(n, 1.0)) for n in order],
                adapter_name=combo,
                combination_type="cat",
            )
        except (ValueError, RuntimeError, TypeError) as exc:
            raise AdapterError(
                f"Cannot combine adapters {order}: {exc}. Use them in separate requests, or "
                "load adapters that target the same kind of modules."
            ) from exc
        with self._state.lock:
            self._state.combos[key] = combo
        return combo

    def _set_weights_on_worker(self, weights: dict[str, float]) -> None:
        key = frozenset(weights)
        self._check_loaded(key)
        self._drop_combos_on_worker(lambda k: k == key)
        with self._state.lock:
            self._state.weights[key] = weights

    def _drop_combos_on_worker(self, predicate: Callable[[frozenset[str]], bool]) -> None:
        with self._state.lock:
            doomed = [(k, v) for k, v in self._state.combos.items() if predicate(k)]
            for k, _ in doomed:
                del self._state.combos[k]
        for _, combo in doomed:
            self._delete_on_worker(combo)  # the one way adapters leave (caches follow)

    def _add_for_training_on_worker(self, name: str, lora_config: Any) -> Any:
        """Add a fresh adapter ``name`` (wrapping the base model on first use); return the model.

        Not registered (requests cannot name it) until training installs it.
        """
        from peft import get_peft_model

        check_wrappable(self._base_model(), f"train adapter {name!r}")
        model = self._model()
        self._changed(name, lora_config)
        try:
            if is_peft_model(model):
                model.add_adapter(name, lora_config)
            else:
                model = get_peft_model(model, lora_config, adapter_name=name)
                self._set_model(model)
        except (ValueError, RuntimeError, TypeError) as exc:
            raise AdapterError(f"Cannot add a LoRA adapter to this model: {exc}") from exc
        return model

    def _claim_for_training_on_worker(self, name: str) -> None:
        """Mark ``name`` as trained by a job (until released); TrainingError if one already is."""
        with self._state.lock:
            if name in self._state.training:
                raise TrainingError(
                    f"Another training job is training adapter {name!r}. Wait for it to end "
                    "(job.result()) or cancel it (job.cancel()), or pick another name."
                )
            self._state.training.add(name)
        # From now on the job may change its weights (a checkpoint restored, each step).
        self._changed(name, self._config_of(name))

    def _release_training_on_worker(self, name: str, changed: bool = False) -> None:
        """End a job's claim on ``name``. ``changed``: the job changed the loaded adapter's
        weights in place without installing them (it failed after a step, or after restoring
        a checkpoint), so the combinations built from its old weights go (a request naming
        the combination again rebuilds it from the weights the adapter has now)."""
        try:
            if changed:
                self._changed(name, self._config_of(name))
                self._drop_combos_on_worker(lambda k: name in k)
        finally:  # the claim ends even if PEFT fails to delete a combination (already forgotten)
            with self._state.lock:
                self._state.training.discard(name)

    def _refuse_if_training(self, name: str, action: str) -> None:
        with self._state.lock:
            busy = isinstance(name, str) and name in self._state.training
        if busy:
            raise AdapterError(
                f"Cannot {action} adapter {name!r}: a training job is training it. Wait for the "
                "job to end (job.result()) or cancel it (job.cancel()) first, or pick another "
                "name."
            )

    def _discard_on_worker(self, name: str) -> None:
        """Delete an adapter added for training that was never installed (the job failed)."""
        if name not in self:
            self._delete_on_worker(name)

    def _install_trained_on_worker(
        self, name: str, directory: Path, metadata: dict[str, Any]
    ) -> Path:
        """Register the adapter a job trained (usable at once) and save it to ``directory``."""
        config = self._model().peft_config[name]
        self._changed(name, config)
        self._drop_combos_on_worker(lambda k: name in k)  # built from its old weights
        info = _info_from_config(name, None, config, AdapterSource.TRAINED)
        if info.base_model is None:
            # PEFT records the base model in a config only when it wraps the model (the first
            # adapter) or saves the adapter; a job that added its adapter to an already wrapped
            # model would list base_model=None although the engine's model is its base.
            info = attrs.evolve(info, base_model=base_model_name(self._base_model()))
        with self._state.lock:
            self._state.infos[name] = info
        return self._save_on_worker(name, directory, metadata)

    def _delete_on_worker(self, name: str) -> None:
        model = self._model()
        if not is_peft_model(model) or name not in model.peft_config:
            return
        self._changed(name, model.peft_config[name])
        if self._fused is not None:
            self._fused.invalidate()  # frees cached copies of the adapter's weights
        model.delete_adapter(name)
        if not model.peft_config:
            # A PeftModel without adapters cannot generate (it looks up its active adapter's
            # config); give the engine back the plain base model, unwrapped.
            self._set_model(model.unload())
        else:
            repoint_active_adapter(model)

    def _load_on_worker(self, directory: Path, name: str, replace: bool) -> AdapterInfo:
        config = read_lora_config(directory)
        self._refuse_if_training(name, "load over" if name in self else "load")
        exists = name in self
        if exists and not replace:
            raise AdapterError(
                f"An adapter named {name!r} is already loaded. Unload it first, pick another "
                "name, or pass replace=True."
            )
        base = self._base_model()
        check_compatible(base, directory, config)
        check_shares_no_base_weights(directory, config)
        check_no_token_clash(self._model(), directory, config)
        check_wrappable(base, f"load adapter {str(directory)!r}")
        if exists:
            # Load the replacement on trial under a reserved name first: one PEFT refuses
            # leaves the old adapter serving, in the defaults and in its combine weights, as
            # it was (it used to be unloaded first, and lost). The old one then goes (its
            # combinations and running requests with it), and its place stays the new one's.
            trial = _TRIAL_PREFIX + name
            self._peft_load_on_worker(directory, trial)
            self._delete_on_worker(trial)
            self._drop_combos_on_worker(lambda k: name in k)
            self._delete_on_worker(name)
        try:
            self._peft_load_on_worker(directory, name)
        except AdapterError:
            if exists:  # PEFT took the same folder a moment ago; should it not, say so truly
                self._forget_on_worker(name)
            raise
        info = _info_from_config(
            name, str(directory), self._model().peft_config[name], AdapterSource.LOADED
        )
        with self._state.lock:
            self._state.infos[name] = info
        return info

    def _peft_load_on_worker(self, directory: Path, name: str) -> None:
        """Load ``directory`` into the model as PEFT adapter ``name``; a failure changes nothing."""
        from peft import PeftModelForCausalLM

        model = self._model()
        wrapped = is_peft_model(model)
        self._changed(name, None)  # its settings are known once PEFT has read them (below)
        # Wrapping a plain model changes it in place (frozen parameters); kept to undo a failure.
        grads = [] if wrapped else [p.requires_grad for p in model.parameters()]
        try:
            if wrapped:
                model.load_adapter(str(directory), adapter_name=name, is_trainable=False)
            else:
                # The causal-LM wrapper (even for adapters saved without a task_type): its
                # forward is what accepts per-row adapter_names.
                model = PeftModelForCausalLM.from_pretrained(
                    model, str(directory), adapter_name=name
                )
                self._set_model(model)
        # TypeError, AttributeError: a mistyped config value (r: "4", rank_pattern: [1]).
        except (ValueError, RuntimeError, KeyError, OSError, TypeError, AttributeError) as exc:
            if wrapped:
                self._delete_on_worker(name)
            else:
                # A wrap undone halfway: whether every base layer is as it was is not known.
                self._engine._note_change(WeightsChange(base=True))
                undo_failed_wrap(model, grads)
            raise AdapterError(
                f"PEFT could not load adapter {str(directory)!r} onto the base model: {exc}. "
                "Check that it was trained for this base model."
            ) from exc
        self._changed(name, self._model().peft_config[name])
        model.eval()
        lend_originals_to_other_adapters(model, self._lending)  # its modules_to_save or tokens

    def _unload_on_worker(self, name: str) -> None:
        self._check_loaded((name,))
        self._refuse_if_training(name, "unload")
        self._drop_combos_on_worker(lambda k: name in k)
        self._delete_on_worker(name)
        self._forget_on_worker(name)

    def _forget_on_worker(self, name: str) -> None:
        """Take ``name`` out of the registry, the defaults and the combine weights."""
        with self._state.lock:
            del self._state.infos[name]
            self._state.defaults = tuple(n for n in self._state.defaults if n != name)
            for key in [k for k in self._state.weights if name in k]:
                del self._state.weights[key]

    def _save_checked_on_worker(self, name: str, path: Path, overwrite: bool) -> Path:
        """``save``: refuses, before writing, a folder holding another saved adapter."""
        info = self.get(name)
        own = info.path is not None and Path(info.path).resolve() == path
        if not own and not overwrite and holds_adapter(path):
            raise AdapterError(
                f"Cannot save adapter {name!r} to {str(path)!r}: the folder already holds "
                "another saved adapter, which this would overwrite. Save to a new folder, or "
                "pass overwrite=True to replace it."
            )
        return self._save_on_worker(name, path)

    def _save_on_worker(
        self, name: str, path: Path, metadata: dict[str, Any] | None = None
    ) -> Path:
        info = self.get(name)
        own = Path(info.path) if info.path is not None else None
        write_adapter_dir(self._model(), name, path, metadata, carry_from=own)
        with self._state.lock:
            # Another adapter whose folder this was no longer has its weights there: its path
            # would let a later save of it over this one pass as a save over its own folder.
            for other, known in self._state.infos.items():
                if other != name and known.path is not None and Path(known.path) == path:
                    self._state.infos[other] = attrs.evolve(known, path=None)
            self._state.infos[name] = attrs.evolve(info, path=str(path))
        return path


def _holds_config(folder: Path) -> bool:
    """Whether ``folder`` holds an adapter config, once a save into it that was killed while
    swapping the new adapter in is settled (its old folder put back; AdapterError when that
    cannot be done, saying where the adapter is)."""
    if (folder / "adapter_config.json").is_file():
        return True
    return finish_cut_short_save(folder) and (folder / "adapter_config.json").is_file()
