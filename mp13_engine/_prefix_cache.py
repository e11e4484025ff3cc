# SPDX-License-Identifier: Apache-2.0
"""``PrefixCache``: reuse the KV of token prefixes already computed, within a memory budget.

Concept
    A request whose prompt starts with tokens the engine computed before (the
    earlier turns of the same conversation, a shared system prompt, a fork of a
    conversation tree) takes their keys and values from here and computes only
    the rest. The cache is a trie of fixed-size *blocks* of ``block`` tokens:
    a node is one block, found from its parent by the block's token ids, so a
    lookup costs one dict probe per block (no scan over entries), and prompts
    that share a prefix share its nodes. Each node keeps, per model layer, the
    keys and values of its tokens as one ``(2, heads, block, dim)`` tensor (on
    that layer's device). Only whole blocks are kept; the tail of a prompt
    shorter than a block is recomputed.

    Roots are per *owner*: the KV of the same tokens differs between adapters
    (and after weights change), so the caller keys every lookup and insert by
    an owner value naming the adapter and the version of its weights.

Eviction
    Least recently used first, within ``budget_bytes`` (the bytes of the stored
    tensors). A lookup or insert marks the nodes it walked as used deepest
    first, so a parent is always more recent than its children and the least
    recently used node is always a leaf: eviction never strands a subtree.

Invariants: ``bytes <= budget_bytes`` after every insert; every node's parent
is in the cache; worker thread only, except :meth:`stats` (any thread).

Privacy note: a hit makes the first token come sooner, so a client that can
time another client's requests on a shared engine can tell whether a prefix
was computed recently (as with any shared prefix cache); set
``EngineConfig.prefix_cache_mb=0`` where clients must not learn that.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import attrs
import torch

from mp13_engine._metrics import BLOCK_TOKENS, PrefixCacheStats


class _Node:
    __slots__ = ("__weakref__", "children", "key", "kv", "nbytes", "parent")

    def __init__(self, parent: _Node | None, key: Any, kv: tuple[torch.Tensor, ...]):
        self.parent = parent
        self.key = key
        self.kv = kv
        self.nbytes = sum(t.numel() * t.element_size() for t in kv)
        self.children: dict[tuple[int, ...], _Node] = {}


@attrs.frozen
class PrefixHit:
    """A lookup's result: ``tokens`` cached tokens and their keys and values, block by block."""

    tokens: int
    #: Per layer, per block: the block's keys and values ``(2, heads, block, dim)`` (the
    #: cache's own tensors: copy them, never write them).
    blocks: tuple[tuple[torch.Tensor, ...], ...]


class PrefixCache:
    """A block trie of computed KV, LRU within a byte budget (see the module docstring)."""

    def __init__(self, budget_bytes: int, block: int = BLOCK_TOKENS):
        self.budget_bytes = int(budget_bytes)
        self.block = block
        self._roots: dict[Hashable, _Node] = {}
        self._lru: collections.OrderedDict[int, _Node] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # guards the counters that stats() reads
        self._lookups = self._hits = self._looked_up = self._saved = self._evicted = 0

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    def stats(self) -> PrefixCacheStats:
        with self._lock:
            return PrefixCacheStats(
                budget_bytes=self.budget_bytes,
                bytes=self._bytes,
                blocks=len(self._lru),
                block_tokens=self.block,
                lookups=self._lookups,
                hits=self._hits,
                tokens_looked_up=self._looked_up,
                tokens_saved=self._saved,
                evicted_blocks=self._evicted,
            )

    def lookup(self, owner: Hashable, ids: Sequence[int], limit: int) -> PrefixHit | None:
        """The longest cached prefix of ``ids`` (at most ``limit`` tokens) under ``owner``."""
        if not self.enabled:
            return None
        path = self._walk(owner, ids, min(limit, len(ids)) // self.block)
        self._touch(path)
        tokens = len(path) * self.block
        with self._lock:
            self._lookups += 1
            self._looked_up += len(ids)
            if path:
                self._hits += 1
                self._saved += tokens
        if not path:
            return None
        return PrefixHit(tokens, tuple(zip(*(node.kv for node in path), strict=True)))

    def insert(
        self,
        owner: Hashable,
        ids: Sequence[int],
        layers: Sequence[tuple[torch.Tensor, torch.Tensor]],
    ) -> int:
        """Keep the whole blocks of ``ids`` whose KV (``layers``: per layer ``(heads, n, dim)``,
        ``n >= len(ids)``) is not cached yet; returns how many blocks were added."""
        if not self.enabled:
            return 0
        blocks = len(ids) // self.block
        if blocks == 0:
            return 0
        root = self._roots.get(owner)
        if root is None:
            root = self._roots[owner] = _Node(None, owner, ())
        node = root
        path: list[_Node] = []
        added = 0
        for b in range(blocks):
            key = tuple(ids[b * self.block : (b + 1) * self.block])
            child = node.children.get(key)
            if child is None:
                lo, hi = b * self.block, (b + 1) * self.block
                kv = tuple(torch.stack((k[:, lo:hi], v[:, lo:hi])) for k, v in layers)
                child = _Node(node, key, kv)
                if child.nbytes > self.budget_bytes:
                    break
                node.children[key] = child
                self._lru[id(child)] = child
                with self._lock:
                    self._bytes += child.nbytes
                added += 1
            path.append(child)
            node = child
        if not root.children:
            self._roots.pop(owner, None)  # nothing fitted the budget
        self._touch(path)
        self._evict()
        return added

    def drop(self, owners: Callable[[Hashable], bool]) -> None:
        """Forget every block under the owners for which ``owners(owner)`` is true."""
        for owner in [o for o in self._roots if owners(o)]:
            stack = list(self._roots.pop(owner).children.values())
            while stack:
                node = stack.pop()
                stack.extend(node.children.values())
                self._forget(node)

    def clear(self) -> None:
        self.drop(lambda owner: True)

    # ----- internals
    def _walk(self, owner: Hashable, ids: Sequence[int], blocks: int) -> list[_Node]:
        node = self._roots.get(owner)
        path: list[_Node] = []
        if node is None:
            return path
        for b in range(blocks):
            child = node.children.get(tuple(ids[b * self.block : (b + 1) * self.block]))
            if child is None:
                break
            path.append(child)
            node = child
        return path

    def _touch(self, path: list[_Node]) -> None:
        for node in reversed(path):  # deepest first: parents end up more recent
            self._lru.move_to_end(id(node))

    def _evict(self) -> None:
        # The least recently used node is always a leaf (see _touch); once only the blocks
        # just inserted are left, that is the deepest of them, so a prompt longer than the
        # budget keeps its beginning.
        while self._bytes > self.budget_bytes and self._lru:
            node = self._lru[next(iter(self._lru))]
            parent = node.parent
            if parent is not None:
                parent.children.pop(node.key, None)
                if parent.parent is None and not parent.children:
                    self._roots.pop(parent.key, None)  # a root's key is its owner
            self._forget(node)
            with self._lock:
                self._evicted += 1

    def _forget(self, node: _Node) -> None:
        if self._lru.pop(id(node), None) is not None:
            with self._lock:
                self._bytes -= node.nbytes
