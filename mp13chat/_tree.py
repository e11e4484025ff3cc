# SPDX-License-Identifier: MIT
"""The conversation tree as a ``rich.Tree``, and short node ids.

A chain of only-children is drawn at one indentation level (a long conversation must
not march off the right edge); a node with several children opens one branch per
child. The cursor's node is highlighted and the path to it marked, so ``/tree`` answers
"where am I and what else is there". Node ids are shown as their first ``SHORT``
characters; ``resolve_node_id`` accepts any unique prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.text import Text
from rich.tree import Tree

from mp13chat._errors import UsageError

SHORT = 6
SNIPPET = 60


def short(node_id: str | None) -> str:
    return (node_id or "")[:SHORT]


def resolve_id(prefix: str, ids: Iterable[str], what: str = "node") -> str:
    """The one id in ``ids`` starting with ``prefix``; ``UsageError`` otherwise."""
    prefix = prefix.strip()
    if not prefix:
        raise UsageError(f"give a {what} id (or its first letters)")
    matches = sorted({i for i in ids if i.startswith(prefix)})
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UsageError(f"no {what} id starts with {prefix!r}; /tree or /list shows them")
    shown = ", ".join(short(m) for m in matches[:8])
    raise UsageError(f"{what} id {prefix!r} is ambiguous ({shown}); type more of it")


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET else flat[: SNIPPET - 1] + "…"


def node_label(node: Any) -> Text:
    """``id role: text [flags]`` for a turn, ``id kind`` for a structural node."""
    label = Text(short(node.id) + " ", style="mp13.info")
    turn = node.turn
    kind = getattr(node.kind, "value", str(node.kind))
    if turn is None:
        label.append(f"({kind})", style="italic")
        if node.label:
            label.append(f" {node.label}")
    else:
        role = getattr(turn.role, "value", str(turn.role))
        label.append(f"{role}: ", style="bold")
        if role == "tool":
            label.append(", ".join(f"{r.name} → {_snippet(r.content)}" for r in turn.tool_results))
        else:
            body = turn.text
            if turn.tool_calls:
                calls = ", ".join(f"{c.name}(…)" for c in turn.tool_calls)
                body = f"{body} [{calls}]" if body else f"[{calls}]"
            label.append(_snippet(body))
        flags = [
            name
            for name in ("cancelled", "truncated", "continuation", "auto")
            if getattr(turn, name, False)
        ]
        if turn.error:
            flags.append("error")
        if flags:
            label.append(" [" + ", ".join(flags) + "]", style="mp13.warn")
    if node.archived:
        label.append(" (closed)", style="mp13.info")
    if node.main_line:
        label.append(" ★", style="mp13.ok")
    if node.commands:
        label.append(f" +{len(node.commands)} cmd", style="mp13.info")
    return label


def conversation_tree(
    title: str, nodes: Sequence[Any], current_id: str | None, path_ids: Iterable[str] = ()
) -> Tree:
    """A ``rich.Tree`` of ``nodes`` (one conversation, any order)."""
    ids = {n.id for n in nodes}
    by_parent: dict[str | None, list[Any]] = {}
    for node in sorted(nodes, key=lambda n: n.seq):
        # a node whose parent is not shown (cut by the caller) is drawn as a top node
        parent = node.parent_id if node.parent_id in ids else None
        by_parent.setdefault(parent, []).append(node)
    on_path = set(path_ids)
    tree = Tree(Text(title, style="mp13.banner"))
    # (container, node, head): a head starts its own branch and holds its chain.
    stack: list[tuple[Tree, Any, bool]] = [
        (tree, r, True) for r in reversed(by_parent.get(None, []))
    ]
    while stack:
        container, node, head = stack.pop()
        if node.parent_id is None and node.turn is None and not node.commands and head:
            here = container  # the bare root: the title stands for it
        else:
            label = node_label(node)
            if node.id == current_id:
                label.stylize("mp13.current")
                label.append("  ◀ you are here", style="mp13.ok")
            elif node.id in on_path:
                label.stylize("bold")
            here = container.add(label)
        kids = by_parent.get(node.id, [])
        if len(kids) == 1:
            # an only child continues the chain at the same level
            stack.append((here if head else container, kids[0], False))
        else:
            stack.extend((here, kid, True) for kid in reversed(kids))
    return tree
