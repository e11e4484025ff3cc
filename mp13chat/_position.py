# SPDX-License-Identifier: MIT
"""Where the REPL is: the prompt's label, ids typed by their first letters, titles, and
the checks a command makes before it asks the model.

Small helpers shared by the commands so that each stays one call into
``mp13_context`` plus rendering. They take the ``Repl`` (``_repl``) and read its
session and current cursor; none of them moves the cursor.
"""

from __future__ import annotations

from collections.abc import Iterable

from mp13_context import TryOut
from mp13chat._errors import ChatError, UsageError
from mp13chat._repl import Repl
from mp13chat._tree import resolve_id, short, snippet

TITLE_LENGTH = 48
LABEL_LENGTH = 24


def prompt_label(repl: Repl) -> str:
    """``[title-or-id @node]`` (``try`` inside a try-out), computed for every prompt."""
    cur = repl.cursor
    info = repl.session.conversation(cur.conversation_id)
    name = snippet(info.title or short(info.id), LABEL_LENGTH)
    extra = " try" if isinstance(cur, TryOut) else ""
    return f"[{name}{extra} @{short(cur.node_id)}]"


def find_conversation(repl: Repl, key: str) -> str:
    """A conversation id from an id prefix or an exact (case-insensitive) title."""
    infos = repl.session.conversations()
    titled = [c.id for c in infos if c.title and c.title.lower() == key.lower()]
    if len(titled) == 1:
        return titled[0]
    ids = [c.id for c in infos]
    if len(titled) > 1 and not any(i.startswith(key) for i in ids):
        shown = ", ".join(short(i) for i in titled[:8])
        raise UsageError(
            f"{len(titled)} conversations are titled {key!r} ({shown}); give one's id "
            "(/list shows them), or /title renames the current one"
        )
    if not titled and not any(i.startswith(key) for i in ids):
        raise UsageError(f"no conversation has the id or title {key!r}; /list shows them")
    return resolve_id(key, ids, "conversation")


def complete_conversations(repl: Repl, index: int, words: list[str]) -> list[str]:
    """Argument completer: the session's conversation ids."""
    return [short(c.id) for c in repl.session.conversations()] if index == 0 else []


def find_node(repl: Repl, key: str) -> str:
    """A node id from a prefix: this conversation first, then the whole session."""
    session = repl.session
    here = [n.id for n in session.conversation_nodes(repl.cursor.conversation_id)]
    if any(i.startswith(key) for i in here):
        return resolve_id(key, here)
    every = [n.id for c in session.conversations() for n in session.conversation_nodes(c.id)]
    return resolve_id(key, every)


def title_from(text: str) -> str:
    """A conversation title from its first question: the first line, at most
    ``TITLE_LENGTH`` characters, cut at a word."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    if len(line) <= TITLE_LENGTH:
        return line
    cut = line[: TITLE_LENGTH - 1]
    mid_word = line[len(cut)] != " "
    if mid_word and " " in cut[TITLE_LENGTH // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:") + "…"


def title_if_untitled(repl: Repl, question: str) -> None:
    """Name the current conversation after ``question`` unless it has a title."""
    cid = repl.cursor.conversation_id
    title = title_from(question)
    if title and not repl.session.conversation(cid).title:
        repl.session.set_title(cid, title)


def require_adapters(repl: Repl, names: Iterable[str] | None = None) -> None:
    """A ``ChatError`` in REPL terms unless every adapter in ``names`` is loaded;
    ``names`` defaults to the adapters this branch uses (checked before a reply)."""
    branch = names is None
    wanted = tuple(repl.cursor.adapters.show() or ()) if names is None else tuple(names)
    if not wanted:
        return
    from mp13_engine import BASE_ADAPTER

    try:
        manager = repl.real_engine("adapters").adapters
    except ChatError:  # another engine client: it answers for adapter names itself
        return
    missing = [n for n in wanted if n != BASE_ADAPTER and n not in manager]
    if not missing:
        return
    name = missing[0]
    loaded = ", ".join(a.name for a in manager.list()) or "none"
    saved = repl.adapters_dir is not None and (repl.adapters_dir / name).is_dir()
    how = f"/adapters load {name}" if saved else f"/adapters load PATH {name}"
    if branch:
        raise ChatError(
            f"this branch uses adapter {name!r}, which is not loaded (loaded: {loaded}); "
            f"{how} loads it, /adapters base answers with the base model"
        )
    raise ChatError(
        f"no adapter named {name!r} is loaded (loaded: {loaded}); {how} loads it, "
        "/train start trains one"
    )


def require_undo(prev: int | None, advice: str) -> None:
    """A ``UsageError`` when a branch setting has no change to undo (``prev``: its
    ``*_prev`` link in ``cursor.settings``). Checked before the cursor's ``pop`` so that
    ``advice`` names REPL commands, not the cursor's methods."""
    if prev is None:
        raise UsageError(f"nothing to undo: {advice}")


def require_tryout(repl: Repl) -> TryOut:
    """The current cursor as a try-out, or a ``UsageError`` saying how to open one."""
    if not isinstance(repl.cursor, TryOut):
        raise UsageError("you are not in a try-out; /try opens one")
    return repl.cursor
