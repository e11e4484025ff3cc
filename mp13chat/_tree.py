# SPDX-License-Identifier: MIT
"""The conversation tree as a ``rich.Tree``, and short node ids.

Layout: a conversation runs down one column, turn after turn; where a node has several
children, the one ``/leaf`` would take among its turns (the promoted one, else the
newest that is not closed) goes on in the column, and every other child opens a
*branch* indented under that node, labelled with what made it: a fork or try-out
(``⑂ fork NAME``, ``⑂ try-out``) and a batch (``⑂ batch``) always open one; an older
``/retry`` reply shows as ``⑂ reply``, another question as ``⑂ question``. Inside a
branch the same rule applies. At a branch point ``★`` marks the way the *main line*
(the path ``/leaf`` follows from the root) goes on; ``◀ you are here`` marks the
cursor and the path to it is bold.

The context layer's structural nodes are not turns and never show their internal
kind: a fork or batch hub is one line saying what it is (``⑂ fork alt``); the root and
placeholders are hidden unless they carry commands (one dim ``⚙`` line: ``⚙ system
set 'Be brief.'``) or the cursor. Node ids are shown as their
first ``SHORT`` characters; ``resolve_id`` accepts any unique prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.text import Text
from rich.tree import Tree

from mp13_context import Command, CommandKind, Node, NodeKind, Role
from mp13chat._errors import UsageError

SHORT = 6
SNIPPET = 60
BRANCH = "⑂"
STAR = "★"


def short(node_id: str | None) -> str:
    return (node_id or "")[:SHORT]


def resolve_id(prefix: str, ids: Iterable[str], what: str = "node") -> str:
    """The one id in ``ids`` starting with ``prefix``; ``UsageError`` otherwise.
    ``prefix`` is a command's text from ``CommandLine.require_text``: stripped, never empty."""
    matches = sorted({i for i in ids if i.startswith(prefix)})
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UsageError(f"no {what} id starts with {prefix!r}; /tree or /list shows them")
    shown = ", ".join(short(m) for m in matches[:8])
    raise UsageError(f"{what} id {prefix!r} is ambiguous ({shown}); type more of it")


def snippet(text: str, width: int = SNIPPET) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def command_text(cmd: Command) -> str:
    """One command in words: ``system set 'Be brief.'``, ``set temperature=0.7``."""
    family, _, verb = cmd.kind.value.partition(".")
    match cmd.kind:
        case CommandKind.PARAMS_SET:
            shown = ", ".join(
                f"{k}={'default' if v is None else v!r}" for k, v in cmd.params.items()
            )
            return f"set {shown}"
        case CommandKind.SYSTEM_SET | CommandKind.SYSTEM_ADD if cmd.text:
            return f"system {verb} {snippet(cmd.text, 40)!r}"
        case CommandKind.ADAPTERS_SET | CommandKind.ADAPTERS_ADD:
            return f"adapters {verb} {', '.join(cmd.names) or 'base model'}"
        case CommandKind.TOOLS_SET | CommandKind.TOOLS_ADD if cmd.scope is not None:
            modes = ", ".join(f"{k}={v.value}" for k, v in cmd.scope.modes.items())
            return f"tools {verb} {modes}"
        case CommandKind.LOG:
            return f"note {snippet(cmd.text or '', 40)!r}"
        case CommandKind.API_CALL:
            return f"call {cmd.text}"
    return f"{family} {verb}".strip()


#: What a branch whose first node is a turn of this role is called.
BRANCH_BY_ROLE = {Role.ASSISTANT: "reply", Role.USER: "question", Role.TOOL: "tool results"}


def branch_tag(node: Node) -> str:
    """What started the branch whose first node is ``node``."""
    match node.kind:
        # /try labels its hub "try-out [LABEL]"; a /fork hub holds the user's label, if any.
        case NodeKind.FORK_HUB if node.label.startswith("try-out"):
            return f"{BRANCH} {node.label}"
        case NodeKind.FORK_HUB:
            return f"{BRANCH} fork {node.label}".rstrip()
        case NodeKind.BATCH_HUB:
            return f"{BRANCH} batch"
    if node.turn is not None:
        return f"{BRANCH} {BRANCH_BY_ROLE[node.turn.role]}"
    return BRANCH


def _structural_label(node: Node) -> Text:
    label = Text()
    match node.kind:
        case NodeKind.FORK_HUB | NodeKind.BATCH_HUB:
            label.append(branch_tag(node), style="mp13.info")
        case NodeKind.ROOT:
            label.append("start", style="mp13.info")
    if node.commands:
        if label:
            label.append("  ")
        label.append("⚙ " + "; ".join(command_text(c) for c in node.commands), style="mp13.info")
    if not label:
        label.append("·", style="mp13.info")
    return label


def node_label(node: Node) -> Text:
    """``id role: text [flags]`` for a turn; for a structural node what it is in words
    (``⑂ fork alt``, ``⚙ system set '...'``), never its internal kind."""
    label = Text(short(node.id) + " ", style="mp13.info")
    turn = node.turn
    if turn is None:
        label.append_text(_structural_label(node))
    else:
        label.append(f"{turn.role.value}: ", style="bold")
        if turn.role is Role.TOOL:
            label.append(", ".join(f"{r.name} → {snippet(r.content)}" for r in turn.tool_results))
        else:
            body = turn.text
            if turn.tool_calls:
                calls = ", ".join(f"{c.name}(…)" for c in turn.tool_calls)
                body = f"{body} [{calls}]" if body else f"[{calls}]"
            label.append(snippet(body))
        flags = [
            name
            for name, on in (
                ("cancelled", turn.cancelled),
                ("truncated", turn.truncated),
                ("continuation", turn.continuation),
                ("auto", turn.auto),
                ("error", turn.error is not None),
            )
            if on
        ]
        if flags:
            label.append(" [" + ", ".join(flags) + "]", style="mp13.warn")
    if node.archived:
        label.append(" (closed)", style="mp13.info")
    return label


def _is_hub(node: Node) -> bool:
    return node.kind in (NodeKind.FORK_HUB, NodeKind.BATCH_HUB)


def continuation(children: Sequence[Node]) -> Node | None:
    """The child the main line (``/leaf``) follows: the promoted one, else the newest
    that is not closed; None when every child is closed."""
    open_ = [c for c in children if not c.archived]
    if not open_:
        return None
    return max(open_, key=lambda c: (bool(c.main_line), c.seq))


class _Drawing:
    """One ``conversation_tree`` call's state (see the module docstring)."""

    def __init__(
        self, nodes: Sequence[Node], current_id: str | None, path_ids: Iterable[str], main: set[str]
    ) -> None:
        self.by_id = {n.id: n for n in nodes}
        self.kids: dict[str, list[Node]] = {}
        for node in sorted(nodes, key=lambda n: n.seq):
            if node.parent_id in self.by_id:
                self.kids.setdefault(node.parent_id, []).append(node)
        self.current_id = current_id
        self.on_path = set(path_ids)
        self.main = main

    def roots(self) -> list[Node]:
        return sorted(
            (n for n in self.by_id.values() if n.parent_id not in self.by_id), key=lambda n: n.seq
        )

    def _shown(self, node: Node) -> bool:
        # Hubs stay as one line (a fork is a point in the conversation, not its next turn);
        # placeholders and the root only when they carry commands or the cursor.
        if node.turn is not None or _is_hub(node):
            return True
        return bool(node.commands) or node.id == self.current_id

    def _item(self, node: Node, star: bool) -> Text:
        label = node_label(node)
        if node.id == self.current_id:
            label.stylize("mp13.current")
            label.append("  ◀ you are here", style="mp13.ok")
        elif node.id in self.on_path:
            label.stylize("bold")
        if star:
            label.append(f" {STAR}", style="mp13.ok")
        return label

    def branch(self, container: Tree, node: Node, star: bool) -> None:
        """A branch under ``container``: a header line saying what made it (the hub's
        own line for a fork or batch), then its column inside."""
        if self._shown(node) and node.turn is None:
            header = container.add(self._item(node, star))
            self.chain(header, node, skip_first=True)
            return
        # Never starred: the main line's child is the column's continuation unless it is
        # a hub (both take the newest open child, main line first), and hubs are shown.
        self.chain(container.add(Text(branch_tag(node), style="mp13.info")), node)

    def chain(self, container: Tree, node: Node | None, *, skip_first: bool = False) -> None:
        """Draw ``node`` and its continuation down one column of ``container``; every
        other child (a fork or batch hub always) opens a branch under the last node
        drawn."""
        anchor: Tree | None = None
        star = False
        while node is not None:
            if self._shown(node) and not skip_first:
                anchor = container.add(self._item(node, star))
            skip_first = False
            children = self.kids.get(node.id, [])
            nxt = continuation([c for c in children if not _is_hub(c)])
            # At a branch point, the child the main line follows gets the marker.
            main = next((c for c in children if c.id in self.main), None)
            main = main if len(children) > 1 else None
            for other in children:
                if other is not nxt:
                    self.branch(anchor or container, other, star=other is main)
            star = nxt is not None and nxt is main
            node = nxt


def conversation_tree(
    title: str,
    nodes: Sequence[Node],
    current_id: str | None,
    path_ids: Iterable[str] = (),
    main_ids: Iterable[str] = (),
) -> Tree:
    """A ``rich.Tree`` of ``nodes`` (one conversation, any order; a node whose parent is
    not among them starts a column of its own). ``main_ids``: the main line's nodes."""
    drawing = _Drawing(nodes, current_id, path_ids, set(main_ids))
    tree = Tree(Text(title, style="mp13.banner"), guide_style="mp13.info")
    for root in drawing.roots():
        drawing.chain(tree, root)
    return tree
