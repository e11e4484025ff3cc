# SPDX-License-Identifier: Apache-2.0
"""``DecodeLoop``: the engine's own step loop (continuous batching with per-row adapters).

One :meth:`DecodeLoop.step` (worker thread):

1. **drop** rows that ended from outside (cancelled, timed out, closed): their
   KV is freed at once;
2. **admit** the requests the scheduler hands over: resolve each row's
   adapter, look its prompt up in the prefix cache, and form *prefill groups*
   (rows without a hit that fit the token budget together, left-padded as one
   batch; a row with a hit alone, on top of its cached KV);
3. **prefill** in chunks under ``EngineConfig.prefill_chunk_tokens`` (padding
   included), the group with the least left to compute first: a long prompt
   takes several steps, running rows decode at every one of them, and a short
   prompt that arrives meanwhile is not held up (the group admitted first keeps
   half the budget, so a stream of short prompts never starves it); a group
   whose prompt is complete samples each row's first token and *joins* the
   running batch;
4. **decode** one token for every running row in one forward, and let rows
   that ended *leave* at once.

Steps 3 and 4 run as *one* forward when they can (``_packed``: the running
rows' tokens and the prompt chunks side by side in one input row, each batch
attending to its own cache): a step in which prompts arrive then reads the
model's weights once, not once per batch. Rows on different adapters pack
when the fused LoRA path serves them (its weights spread per token). Not when
PEFT's own loop serves mixed rows, nor for a group retried unfused after a
fault, nor for a model whose attention cannot run packed (found out at the
first try; the loop stops packing for it), nor when ``EngineConfig.packed_steps``
is off.

Why own the cache (and not transformers' continuous batching)
    transformers ships continuous batching (``generate_batch``, a paged cache
    and its scheduler) but it cannot give each row its own LoRA adapter nor its
    own seeded sampler, which mp13 serves in one batch. So the loop keeps a
    batched ``DynamicCache`` of its own (``_kv.BatchKV``: rows right-aligned,
    padded on the left, joined and cut as rows come and go) and calls the
    model's own ``forward`` with the attention mask and position ids that
    follow from the rows' lengths, so every attention implementation and mask
    function of transformers works unchanged, on CPU too. The ideas taken from
    there: chunked prefill under a token budget and block-keyed prefix reuse.

Faults (nothing a model raises stops the loop)
    A forward that raises (any ``BaseException``) is rolled back; a decode
    batch is then retried row by row without the fused LoRA hooks, so only the
    rows that fail alone end ``ERROR`` (the others keep their tokens and go on
    in the same step); a prefill group splits into single rows that retry at
    the next step, also without the fused hooks. Hooks a failed PEFT forward
    leaves behind are removed (``ModelCall``). A row whose logits hold NaN or
    infinity ends ``ERROR``; its neighbours are untouched.

Adapters and weights
    A worker call (``_run_on_worker``: adapter load/unload, ...) or a job step
    (training) may change adapters between two steps. The loop is told
    (:meth:`weights_changed`, with the ``WeightsChange`` the call or step said):
    fused plans are rebuilt, the prefix cache forgets the blocks of the weights
    that changed (the base model's: all; an adapter's: its own and those of the
    combinations that contain it; the others stay warm), and a running row whose adapter was
    unloaded, replaced or re-weighted ends ``ERROR`` (its cached KV came from the old
    weights). A row on an adapter that a job is training in place sees the
    weights of each step.

Invariants: ``running[i]`` is row ``i`` of ``kv``; every row in the loop
belongs to a request that was started and is resolved exactly once (by the
loop, or by the thread that cancelled it or timed it out); a step never
raises for a fault of the model; worker thread only, except the counters.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from mp13_engine._changes import CacheOwner, WeightsChange
from mp13_engine._compat import is_peft_model
from mp13_engine._errors import AdapterError
from mp13_engine._forward import ModelCall
from mp13_engine._generation import bad_rows, choose
from mp13_engine._kv import BatchKV
from mp13_engine._output import RequestStatus
from mp13_engine._packed import PackedCache, PackingUnsupported, Part
from mp13_engine._prefix_cache import PrefixCache
from mp13_engine._rows import PrefillGroup, Row
from mp13_engine._state import EngineState
from mp13_engine._streams import RequestState
from mp13_engine._types import BASE_ADAPTER, FinishReason, TokenLogprob, adapter_names

_log = logging.getLogger(__name__)

#: Rows that ended this way keep their KV in the prefix cache (prompt and reply).
_COMPLETED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH)

#: Packed forwards that may fail in a row (each step then retried unpacked) before the
#: loop stops packing: a model that fails only packed would otherwise pay twice per step.
_PACK_FAULTS = 3

Chunk = tuple[PrefillGroup, int, int, list[int]]  # group, start, end, real tokens per row


class DecodeLoop:
    """The step loop (see the module docstring). Worker thread only, except the counters."""

    def __init__(
        self,
        state: EngineState,
        adapters: Callable[[], Any],
        prefix: PrefixCache,
        max_batch_size: int,
        chunk_tokens: int,
        packed: bool = True,
    ):
        self._state = state
        self._adapters = adapters
        self._prefix = prefix
        self._call = ModelCall(state, adapters)
        self._max_rows = max_batch_size
        self._chunk = chunk_tokens
        self._pack = packed  # off for good once a model turns out not to run packed
        self._pack_faults = 0  # packed forwards failed in a row
        self._eos = torch.tensor(state.eos_ids, dtype=torch.long)
        self._eos_set = frozenset(state.eos_ids)
        self.kv = BatchKV()
        self.running: list[Row] = []
        self.prefills: collections.deque[PrefillGroup] = collections.deque()
        # Versions of the weights, part of the prefix-cache keys (CacheOwner.version): the
        # base model's, every adapter's at once, and each adapter's own (missing: 0).
        self._base_version = 0
        self._adapters_version = 0
        self._versions: dict[str, int] = {}
        self.steps = 0  # steps run (read by tests and metrics)
        self.forwards = 0
        self.packed = 0  # forwards that computed several batches at once

    # ----- any thread (approximate while a step runs)
    @property
    def active(self) -> bool:
        return bool(self.running or self.prefills)

    def free_slots(self) -> int:
        return self._max_rows - len(self.running) - sum(len(p.rows) for p in self.prefills)

    # ----- worker thread
    def step(self, admitted: Sequence[RequestState]) -> int:
        """Run one step; returns the tokens it computed (prefill and decode)."""
        model = self._state.model
        # A training job may leave the model in train mode between its steps;
        # serving must not see dropout, so steps always run in eval mode.
        was_training = bool(model.training)
        if was_training:
            model.eval()
        try:
            self._drop_ended()
            # Outside inference mode: resolving adapters may build a combination of
            # adapters, whose weights must stay ordinary (trainable later) tensors.
            self._admit(admitted)
            with torch.inference_mode():
                tokens = self._packed_step()
                if tokens is None:
                    tokens = self._prefill_step() + self._decode_step()
        finally:
            if was_training:
                model.train()
        self.steps += 1
        return tokens

    def weights_changed(self, change: WeightsChange) -> None:
        """A worker call or a job step ran and says ``change`` of the weights changed."""
        self._call.forget_plans()
        if change.base:
            self._base_version += 1
        if change.every_adapter:
            self._adapters_version += 1
        for name in change.adapters:
            self._versions[name] = self._versions.get(name, 0) + 1
        if change.base:
            self._prefix.clear()
        else:
            self._prefix.drop(lambda owner: _touched(change, owner))
        if self.active:
            self._check_adapters()

    def abort(self, reason: FinishReason, error: str | None = None) -> None:
        """Resolve every row in the loop with ``reason`` and empty it (close, or a loop bug)."""
        rows = self.running + [r for p in self.prefills for r in p.rows]
        self.running, self.prefills, self.kv = [], collections.deque(), BatchKV()
        for row in rows:
            try:
                row.state.finish(reason, error)
            except Exception:
                _log.exception("resolving request %s failed", row.state.id)

    # ----- 1. rows that ended from outside
    def _drop_ended(self) -> None:
        if any(_ended(r.state) for r in self.running):
            keep = []
            for i, row in enumerate(self.running):
                if _ended(row.state):
                    row.state.finish(FinishReason.CANCELLED)  # a no-op when resolved
                else:
                    keep.append(i)
            self._keep(keep)
        for group in list(self.prefills):
            if any(_ended(r.state) for r in group.rows):
                keep = [i for i, r in enumerate(group.rows) if not _ended(r.state)]
                for row in group.rows:
                    if _ended(row.state):
                        row.state.finish(FinishReason.CANCELLED)
                group.select(keep)
                if not group.rows:
                    self.prefills.remove(group)

    def _check_adapters(self) -> None:
        model = self._state.model
        configs = model.peft_config if is_peft_model(model) else {}

        def stale(row: Row) -> bool:
            return row.adapter != BASE_ADAPTER and configs.get(row.adapter) is not row.config

        message = (
            "adapter {} was unloaded, replaced or re-weighted while this request ran (its "
            "cached keys and values came from the old weights); send the request again"
        )
        for row in self.running + [r for p in self.prefills for r in p.rows]:
            if stale(row):
                names = ", ".join(row.state.adapter_names) or row.adapter
                row.state.finish(FinishReason.ERROR, message.format(repr(names)))
        self._drop_ended()

    # ----- 2. admission
    def _admit(self, states: Sequence[RequestState]) -> None:
        if not states:
            return
        manager = self._adapters()
        fresh: list[Row] = []
        for st in states:
            if not st.start():  # cancelled before it ran (now resolved) or already resolved
                continue
            try:
                adapter = manager._resolve_for_wave(st.request.adapters)
                st.adapter = adapter
                st.adapter_names = adapter_names(st.request.adapters, manager.defaults)
            except AdapterError as exc:
                st.finish(FinishReason.ERROR, str(exc))
                continue
            except Exception as exc:
                st.finish(FinishReason.ERROR, f"adapter resolution failed: {exc}")
                continue
            model = self._state.model
            config = None
            if adapter != BASE_ADAPTER:
                config = model.peft_config.get(adapter) if is_peft_model(model) else None
            # A combination's blocks also go when one of its members changes.
            names = frozenset((adapter, *st.adapter_names) if adapter != BASE_ADAPTER else ())
            row = Row(st, adapter, config, self._owner(adapter, names))
            prompt = row.seq
            hit = self._prefix.lookup(row.owner, prompt, len(prompt) - 1)
            if hit is None:
                fresh.append(row)
                continue
            st.cached_tokens = hit.tokens
            kv = BatchKV.from_hit(hit, len(prompt) - hit.tokens)
            self.prefills.append(
                PrefillGroup([row], [prompt[hit.tokens :]], kv, self._state.pad_id)
            )
        self._group(fresh)

    def _group(self, rows: list[Row]) -> None:
        """Rows without a cache hit, in arrival order, as groups of at most the budget."""
        group: list[Row] = []
        width = 0
        for row in [*rows, None]:  # None flushes the last group
            n = len(row.seq) if row is not None else 0
            if group and (row is None or (len(group) + 1) * max(width, n) > self._chunk):
                todo = [r.seq for r in group]
                self.prefills.append(PrefillGroup(group, todo, BatchKV(), self._state.pad_id))
                group, width = [], 0
            if row is not None:
                group.append(row)
                width = max(width, n)

    # ----- 3 and 4 in one forward
    def _packed_step(self) -> int | None:
        """Prompt chunks and decode rows in one packed forward; None: not this step."""
        if not self._pack or not self.prefills:
            return None
        chunks = self._chunks()
        rows = self.running
        if len(chunks) + bool(rows) < 2:
            return None  # one batch: its own forward is the same thing
        groups = [c[0] for c in chunks]
        names = [r.adapter for r in rows] + [r.adapter for g in groups for r in g.rows]
        if not all(g.fused for g in groups) or not self._call.packable(names):
            return None  # rows that PEFT's loop serves are told apart by batch row
        parts = [Part(g.kv, g.ids[:, a:b], new, b == g.width) for g, a, b, new in chunks]
        if rows:
            ids = torch.tensor([[r.last] for r in rows], dtype=torch.long)
            parts.insert(0, Part(self.kv, ids, [1] * len(rows), True))
        lengths = [p.kv.lengths() for p in parts]
        self.forwards += 1
        try:
            logits = self._call.packed(names, PackedCache(parts, self._state.device))
        except BaseException as exc:
            for part, held in zip(parts, lengths, strict=True):
                part.kv.rollback(held)
            self._packing_failed(exc)
            return None  # this step runs unpacked, with its own fault handling
        self._pack_faults = 0
        self.packed += 1
        for part in parts:
            part.kv.advance(part.new)
        tokens = self._decoded(rows, logits[: len(rows)]) if rows else 0
        at = len(rows)
        for group, start, end, _ in chunks:
            tokens += len(group.rows) * (end - start)
            n = len(group.rows) if end == group.width else 0
            self._prefilled(group, end, logits[at : at + n])
            at += n
        return tokens

    def _packing_failed(self, exc: BaseException) -> None:
        if isinstance(exc, PackingUnsupported):
            _log.info("this model's attention cannot run packed (%s); not packing", exc)
            self._pack = False
            return
        self._pack_faults += 1
        if self._pack_faults >= _PACK_FAULTS:
            _log.warning(
                "%d packed forwards failed in a row (last: %s); prompt chunks and decode rows "
                "run in separate forwards from now on",
                self._pack_faults,
                _describe(exc),
            )
            self._pack = False

    # ----- 3. prefill
    def _chunks(self) -> list[Chunk]:
        """The prompt chunks of this step, within the token budget."""
        if not self.prefills:
            return []
        budget = self._chunk
        spent = 0
        chunks: list[Chunk] = []
        # Shortest remaining prompt first: a short request that arrives while a long prompt
        # is being prefilled gets its first token at once instead of after the long one.
        # But the group admitted first keeps half the budget (what it needs, if less) at
        # every step: short prompts that keep arriving would otherwise take each step's
        # whole budget, and the long prompt would never get its first token.
        oldest = self.prefills[0]
        reserved = min(oldest.cost(), budget // 2)
        for group in sorted(self.prefills, key=PrefillGroup.cost):
            if group is oldest:
                room = max(budget - spent, reserved)
                reserved = 0
            else:
                room = budget - spent - reserved
                if spent and room <= 0:
                    continue
            start, end, new = group.chunk(room)
            spent += len(group.rows) * (end - start)
            chunks.append((group, start, end, new))
        return chunks

    def _prefill_step(self) -> int:
        spent = 0
        for group, start, end, new in self._chunks():
            spent += len(group.rows) * (end - start)
            logits = self._forward_group(group, group.ids[:, start:end], new)
            if logits is not None:
                self._prefilled(group, end, logits)
        return spent

    def _prefilled(self, group: PrefillGroup, end: int, logits: torch.Tensor) -> None:
        """A chunk up to column ``end`` was computed; ``logits`` when the prompts are done."""
        group.done = end
        if end == group.width:
            self.prefills.remove(group)
            self._complete(group, logits)

    def _forward_group(
        self, group: PrefillGroup, ids: torch.Tensor, new: list[int]
    ) -> torch.Tensor | None:
        rows = group.rows
        try:
            return self._forward(rows, group.kv, ids, new, fused=group.fused)
        except BaseException as exc:
            if len(rows) == 1 and not group.fused:
                self._fail(rows, exc)
                self.prefills.remove(group)
            else:
                # Retry each row alone, unfused, from the next step: only a row that fails
                # alone on PEFT's own path fails.
                at = self.prefills.index(group)
                self.prefills.remove(group)
                for part in reversed(group.split()):
                    self.prefills.insert(at, part)
            return None

    def _complete(self, group: PrefillGroup, logits: torch.Tensor) -> None:
        """Prompts done: insert their KV into the prefix cache, take each first token, join."""
        kv = group.kv
        for i, row in enumerate(group.rows):
            if self._current(row):  # else its key is stale: no lookup could ever reach it
                self._prefix.insert(row.owner, row.seq, kv.row_layers(i))
            row.state.batch_size = max(row.state.batch_size, len(group.rows))
        keep = self._accept(group.rows, logits)
        kv.select(keep)
        self.kv.join(kv)
        self.running.extend(group.rows[i] for i in keep)

    # ----- 4. decode
    def _decode_step(self) -> int:
        rows = self.running
        if not rows:
            return 0
        ids = torch.tensor([[r.last] for r in rows], dtype=torch.long)
        logits: torch.Tensor | None
        try:
            logits = self._forward(rows, self.kv, ids, [1] * len(rows), fused=True)
        except BaseException as exc:
            logits = self._isolate(exc, ids)
            rows = self.running
        if logits is None:
            return 0
        return self._decoded(rows, logits)

    def _decoded(self, rows: list[Row], logits: torch.Tensor) -> int:
        """The running ``rows`` got their next logits: sample, and let ended rows leave."""
        size = len(rows)
        for row in rows:
            row.seq.append(row.last)
            st = row.state
            if st.batch_size < size:
                st.batch_size = size
        keep = self._accept(rows, logits)
        self._leave(keep)
        return size

    def _isolate(self, exc: BaseException, ids: torch.Tensor) -> torch.Tensor | None:
        """The batch forward raised: run each row alone (PEFT's path); only failures fail."""
        _log.warning("a decode step failed (%s); retrying its rows one by one", _describe(exc))
        if _is_oom(exc) and self._state.device.type == "cuda":
            torch.cuda.empty_cache()  # what the failed batch held; the rows alone need less
        survivors: list[Row] = []
        parts: list[BatchKV] = []
        logits: list[torch.Tensor] = []
        for i, row in enumerate(self.running):
            sub = self.kv.take(i)
            try:
                out = self._forward([row], sub, ids[i : i + 1], [1], fused=False)
            except BaseException as alone:
                self._fail([row], alone)
                continue
            survivors.append(row)
            parts.append(sub)
            logits.append(out)
        self.running = survivors
        self.kv = BatchKV.concat(parts)
        if not survivors:
            return None
        return torch.cat([x.to(logits[0].device) for x in logits])

    def _leave(self, keep: list[int]) -> None:
        if len(keep) == len(self.running):
            return
        kept = set(keep)
        for i, row in enumerate(self.running):
            if i not in kept and row.state.status in _COMPLETED and self._current(row):
                self._prefix.insert(row.owner, row.seq, self.kv.row_layers(i))
        self._keep(keep)

    def _keep(self, keep: list[int]) -> None:
        self.kv.select(keep)
        self.running = [self.running[i] for i in keep]

    def _current(self, row: Row) -> bool:
        """Whether the row's KV still matches the weights (no change since it was admitted)."""
        return row.owner == self._owner(row.adapter, row.owner.names)

    def _owner(self, adapter: str, names: frozenset[str]) -> CacheOwner:
        """The prefix-cache key of rows on ``adapter`` (using ``names``' weights) now."""
        if not names:
            return CacheOwner(adapter, names, (self._base_version,))
        own = tuple((n, self._versions.get(n, 0)) for n in sorted(names))
        return CacheOwner(adapter, names, (self._base_version, self._adapters_version, *own))

    # ----- shared
    def _forward(
        self, rows: list[Row], kv: BatchKV, ids: torch.Tensor, new: list[int], fused: bool
    ) -> torch.Tensor:
        """One forward adding ``new[i]`` tokens to row ``i``; on failure ``kv`` is unchanged."""
        device = self._state.device
        mask, pos = kv.inputs(new, device)
        lengths = kv.lengths()
        self.forwards += 1
        try:
            logits = self._call(
                [r.adapter for r in rows], ids.to(device), mask, pos, kv.cache, fused=fused
            )
        except BaseException:
            kv.rollback(lengths)
            raise
        kv.advance(new)
        return logits

    def _accept(self, rows: list[Row], logits: torch.Tensor) -> list[int]:
        """Choose and hand out each row's token; returns the indices of rows that go on."""
        bad = bad_rows(logits)
        if any(bad):
            logits[torch.tensor(bad, device=logits.device)] = 0.0
        vocab = logits.shape[-1]
        for row in rows:
            if row.sampling.penalty != 1.0:
                row.sampling.note(row.seq[row.noted :], vocab, logits.device)
                row.noted = len(row.seq)
        sampling = [r.sampling for r in rows]
        # Request.logprobs: a slot per row, only when a row asks (choose fills its slot)
        logprobs: list[TokenLogprob | None] | None = None
        if any(s.logprobs for s in sampling):
            logprobs = [None] * len(rows)
        tokens = choose(logits, sampling, [r.n for r in rows], self._eos, logprobs)
        keep = []
        for i, (row, tok) in enumerate(zip(rows, tokens, strict=True)):
            st = row.state
            if bad[i]:
                st.finish(
                    FinishReason.ERROR,
                    f"the model produced NaN or infinite logits for this request at token "
                    f"{row.n + 1}; its output stops here. Try float32 or bfloat16 instead of "
                    "float16, or check the adapter it uses",
                )
                continue
            if tok in self._eos_set:
                st.finish(FinishReason.STOP)
                continue
            row.n += 1
            # True: a stop string completed, a cancel is pending, or resolved
            if st.append(tok, None if logprobs is None else logprobs[i]):
                st.finish(FinishReason.STOP)  # CANCELLED when a cancel is pending
                continue
            if row.n >= row.sampling.max_new:
                st.finish(FinishReason.LENGTH)
                continue
            row.last = tok
            keep.append(i)
        return keep

    def _fail(self, rows: list[Row], exc: BaseException) -> None:
        if _is_oom(exc) and self._state.device.type == "cuda":
            torch.cuda.empty_cache()
        for row in rows:
            row.state.finish(FinishReason.ERROR, _message(exc))


def _touched(change: WeightsChange, owner: Hashable) -> bool:
    """Whether ``change`` makes the blocks of a prefix-cache owner key stale."""
    return not isinstance(owner, CacheOwner) or change.touches(owner.names)


def _ended(st: RequestState) -> bool:
    """Resolved or asked to cancel from outside the loop (cancel, timeout, close)."""
    return st.status >= RequestStatus.CANCELLING


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in _describe(exc).lower()


def _describe(exc: BaseException) -> str:
    """``Type: message``, even for an exception whose ``__str__`` itself raises."""
    try:
        text = str(exc)
    except Exception:
        text = "(its message could not be read)"
    return f"{type(exc).__name__}: {text}"


def _message(exc: BaseException) -> str:
    if _is_oom(exc):
        return (
            f"out of memory while generating ({_describe(exc)}); retry with fewer or "
            "shorter requests, a smaller max_batch_size or prefill_chunk_tokens, or a "
            "quantized model"
        )
    return f"generation failed: {_describe(exc)}"
