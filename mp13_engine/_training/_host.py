# SPDX-License-Identifier: Apache-2.0
"""``TrainingHost``: everything a training job may use of the engine it trains on.

Concept
    A job never reaches into the engine or the adapter manager. The manager
    builds one ``TrainingHost`` (``engine.adapters.training_host()``) when
    ``engine.train`` starts a job, and the job uses nothing else: the
    tokenizer and the engine's own chat preparation and encoding (so training
    sees exactly the prompts serving renders), where adapters are saved, the
    worker it runs on, and the adapter operations training needs (add an
    untrained adapter, discard it, install the trained one).

Invariants
    * The fields marked *worker* are called on the engine's worker thread only
      (inside ``run_on_worker`` or a job step); the others from any thread.
    * ``tokenizer`` is shared with serving: use it only while holding
      ``tokenizer_lock`` (HF fast tokenizers raise "Already borrowed" when two
      threads use one at once). ``encode_chat`` takes the lock itself.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:  # annotations only: the scheduler and the renderer import nothing of this
    from mp13_engine._changes import WeightsChange
    from mp13_engine._scheduler import Job
    from mp13_engine._training._render import EncodeChat, Prepare


@attrs.frozen(kw_only=True)
class TrainingHost:
    """What a training job is handed at start (see the module docstring)."""

    #: The engine's tokenizer (hold ``tokenizer_lock`` while using it).
    tokenizer: Any
    #: The id serving pads with (``EngineState.pad_id``); training pads its batches with it.
    pad_id: int
    #: Serialises tokenizer use with serving (re-entrant).
    tokenizer_lock: AbstractContextManager[Any]
    #: ``(messages, tools) -> (messages, tools)``: serving's adaptation of a chat.
    prepare: Prepare
    #: Serving's encoding of a rendered chat (message text never forges control tokens).
    encode_chat: EncodeChat
    #: ``EngineConfig.adapters_dir`` (expanded), where a trained adapter is saved by default.
    adapters_dir: Path | None
    #: ``run_on_worker(fn)``: run ``fn`` on the worker between model calls; its result or raise.
    run_on_worker: Callable[[Callable[[], Any]], Any]
    #: *worker*: say what the running call or job step changed of the weights (a
    #: ``WeightsChange``); the prefix cache then keeps the blocks of the others.
    note_change: Callable[[WeightsChange], None]
    #: Queue stepwise work whose steps the worker interleaves with serving.
    submit_job: Callable[[Job], None]
    #: *worker*: the serving model (a ``PeftModel`` once an adapter exists).
    model: Callable[[], Any]
    #: *worker*: the transformers model under any PEFT wrapper.
    base_model: Callable[[], Any]
    #: Whether an adapter of that name is loaded (requests can name it).
    is_loaded: Callable[[str], bool]
    #: *worker*: claim ``name`` for this job (loading, replacing or unloading it is refused
    #: until released); TrainingError when another job has claimed it.
    claim: Callable[[str], None]
    #: *worker*: ``release(name, changed)`` ends a claim (the job finished, was cancelled or
    #: failed); ``changed``: the job changed a loaded adapter's weights in place without
    #: installing them (what was built from the old weights is dropped).
    release: Callable[[str, bool], None]
    #: *worker*: ``add_adapter(name, lora_config)`` adds an untrained adapter requests cannot
    #: name yet (wrapping the model on first use); returns the model.
    add_adapter: Callable[[str, Any], Any]
    #: *worker*: delete an adapter added by ``add_adapter`` that was never installed.
    discard_adapter: Callable[[str], None]
    #: *worker*: ``install_adapter(name, directory, metadata)`` registers the trained adapter
    #: (usable at once) and saves it to ``directory``; returns the directory.
    install_adapter: Callable[[str, Path, dict[str, Any]], Path]
