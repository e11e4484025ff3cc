# SPDX-License-Identifier: MIT
"""Moving around the tree and branching: tree, goto, up/down/next/prev, fork, batch,
try/promote/close, retry, continue, trim, and showing the current exchange.

Each command is one cursor call (``mp13_context.Cursor``) plus rendering. Branching
leaves the old branch intact: ``/fork`` and ``/try`` move the REPL to a new cursor on a
new branch; ``/retry`` adds a sibling reply; ``/trim`` archives the dropped part.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from rich.panel import Panel
from rich.text import Text

from mp13_context import Node, NodeKind, Role, TryOut, Turn
from mp13_engine import FinishReason
from mp13_toolbox import plural
from mp13chat import _position as position
from mp13chat import _render as render
from mp13chat._errors import UsageError
from mp13chat._registry import Command, CommandLine, command, parse_int
from mp13chat._repl import Repl
from mp13chat._reply import footer, run_exchange
from mp13chat._tree import conversation_tree, node_label, short


def _complete_nodes(repl: Repl, index: int, words: list[str]) -> list[str]:
    if index != 0:
        return []
    return [short(n.id) for n in repl.session.conversation_nodes(repl.cursor.conversation_id)]


def show_here(repl: Repl) -> None:
    """One line for where the cursor is now (and the reply there, if any)."""
    cur = repl.cursor
    label = node_label(cur.node)
    label.stylize("bold")
    repl.console.print(label)
    turn = cur.turn
    if turn is not None and turn.role is Role.ASSISTANT and turn.text.strip():
        render.print_reply(repl.console, turn.text, markdown=repl.config.markdown)


def _complete_tree(repl: Repl, index: int, words: list[str]) -> list[str]:
    return ["all"] if index == 0 else []


@command("tree", group="navigation", usage="/tree [DEPTH|all]", complete=_complete_tree)
def tree(repl: Repl, line: CommandLine) -> None:
    """Show this conversation as a tree; ◀ marks where you are.

    Turns run down one column. Where a node has several children, the newest turn
    goes on in the column and every other child is a branch indented under the node,
    saying what made it: ⑂ fork NAME, ⑂ try-out, ⑂ batch (forks, try-outs and batches
    always branch), ⑂ reply for an earlier /retry, ⑂ question. At a branch point ★
    marks the way the main line (what /leaf follows) goes; ⚙ lines are recorded
    commands (system message, parameters, ...). Long conversations show the last DEPTH
    levels above you (default 30) and everything below; /tree all shows every node.
    """
    cur = repl.cursor
    info = repl.session.conversation(cur.conversation_id)
    nodes = repl.session.conversation_nodes(info.id)
    title = f"{info.title or 'conversation'} {short(info.id)}"
    depth = None if line.text == "all" else parse_int(line.text or "30", "DEPTH", minimum=1)
    if depth is not None:
        cutoff = cur.node.depth - depth
        hidden = sum(1 for n in nodes if n.depth < cutoff)
        if hidden:
            nodes = [n for n in nodes if n.depth >= cutoff]
            title += f"  ({plural(hidden, 'node')} above not shown: /tree all)"
    path = [n.id for n in cur.path()]
    main = [n.id for n in repl.session.path(repl.session.leaf(info.root_id).id)]
    repl.console.print(conversation_tree(title, nodes, cur.node_id, path, main))


@command("goto", group="navigation", usage="/goto NODE", complete=_complete_nodes)
def goto(repl: Repl, line: CommandLine) -> None:
    """Go to a node by id (or its first letters; /tree and /search show ids)."""
    node_id = position.find_node(repl, line.require_text("a node id"))
    repl.cursor.goto(node_id)
    show_here(repl)


@command("up", group="navigation", usage="/up [N]")
def up(repl: Repl, line: CommandLine) -> None:
    """Go up N nodes (default 1) towards the root."""
    steps = parse_int(line.text or "1", "N", minimum=1)
    above = repl.cursor.node.depth
    if above and steps > above:
        # Checked first: moving part of the way and then failing would leave the
        # cursor somewhere the user did not ask for, with only an error to show.
        raise UsageError(f"only {plural(above, 'node')} above here; /up {above} goes to the root")
    for _ in range(steps):
        repl.cursor.parent()
    show_here(repl)


@command("down", group="navigation", usage="/down [I]")
def down(repl: Repl, line: CommandLine) -> None:
    """Go down to child I (1 = oldest; default the newest)."""
    index = parse_int(line.text, "I", minimum=1) - 1 if line.text else -1
    count = len(repl.cursor.children())
    if count and index >= count:
        # The cursor counts from 0; say it in the numbers the user typed.
        children = plural(count, "child", "children")
        raise UsageError(f"this node has {children}; give I from 1 to {count}")
    repl.cursor.child(index)
    show_here(repl)


@command("next", group="navigation")
def next_(repl: Repl, line: CommandLine) -> None:
    """Go to the next sibling (e.g. the next retry of a reply)."""
    _step_sibling(repl, +1)
    show_here(repl)


@command("prev", group="navigation")
def prev(repl: Repl, line: CommandLine) -> None:
    """Go to the previous sibling."""
    _step_sibling(repl, -1)
    show_here(repl)


def _alternatives(repl: Repl) -> tuple[list[Node], int]:
    """The nodes /next and /prev move between, and the index of the one holding the cursor.

    Those are the cursor node's siblings, except where the node is the only child of a
    command-carrying placeholder: a /retry after a /set (or any recorded command) puts
    the new reply under such a placeholder, beside the old reply, so that the command
    still applies. The retries are then the placeholder's siblings, and stepping moves
    between them as it does between retries without a command in between.
    """
    node = repl.cursor.node
    while node.parent_id is not None:
        siblings = repl.session.children(node.parent_id)
        parent = repl.session.node(node.parent_id)
        if len(siblings) > 1 or parent.kind is not NodeKind.PLACEHOLDER:
            break
        if parent.parent_id is None or len(repl.session.children(parent.parent_id)) < 2:
            break
        node = parent
    level = [node] if node.parent_id is None else repl.session.children(node.parent_id)
    return level, [n.id for n in level].index(node.id)


def _step_sibling(repl: Repl, offset: int) -> None:
    """Move ``offset`` places among the alternatives (see ``_alternatives``); a
    ``UsageError`` that says where the user is when there is none that way."""
    level, here = _alternatives(repl)
    if not 0 <= here + offset < len(level):
        if len(level) == 1:
            raise UsageError("this node has no siblings; /retry on a reply makes another one")
        if offset > 0:
            raise UsageError(f"this is the last of {len(level)} siblings; /prev goes back")
        raise UsageError(f"this is the first of {len(level)} siblings; /next goes forward")
    target = level[here + offset]
    # A retry's placeholder only carries its commands: land on the reply under it.
    while target.kind is NodeKind.PLACEHOLDER and (kids := repl.session.children(target.id)):
        target = kids[-1]
    repl.cursor.goto(target.id)


@command("leaf", group="navigation", aliases=("bottom",))
def leaf(repl: Repl, line: CommandLine) -> None:
    """Go down the main line to its last node."""
    repl.cursor.leaf()
    show_here(repl)


@command("history", group="navigation", aliases=("show",))
def history(repl: Repl, line: CommandLine) -> None:
    """Show the conversation on this branch, from the root to here."""
    if all(node.turn is None for node in repl.cursor.path()):
        render.print_info(repl.console, "no messages on this branch yet; type one to start")
        return
    for node_id, turn, parts in _whole_turns(repl.cursor.path()):
        match turn.role:
            case Role.USER:
                repl.console.print(Text("you: ", style="bold cyan") + Text(turn.text))
            case Role.TOOL:
                for result in turn.tool_results:
                    repl.console.print(render.tool_result_panel(result))
            case Role.ASSISTANT:
                if repl.config.show_reasoning:
                    render.print_reasoning(repl.console, "".join(p.reasoning for p in parts))
                text = "".join(p.text for p in parts)
                render.print_reply(repl.console, text, markdown=repl.config.markdown)
                for call in (c for p in parts for c in p.tool_calls):
                    repl.console.print(render.tool_call_panel(call))
                # The footer as the last part's reply printed it (its perplexity too,
                # when this run made it with logprobs on).
                repl.console.print(footer(turn, repl.reply_logprobs.get(node_id)))


def _whole_turns(path: Iterable[Node]) -> Iterator[tuple[str, Turn, list[Turn]]]:
    """The turns of ``path``, each reply with its /continue parts, as the model sees it:
    ``(last part's node id, last part, parts)``. Shown apart, a continued reply read as
    two replies, and the first one's footer still said "truncated: /continue goes on"."""
    parts: list[Turn] = []
    last = ""
    for node in path:
        turn = node.turn
        if turn is None:
            continue
        if parts and turn.role is Role.ASSISTANT and turn.continuation:
            parts.append(turn)
            last = node.id
            continue
        if parts:
            yield last, parts[-1], parts
        parts = [turn]
        last = node.id
    if parts:
        yield last, parts[-1], parts


@command("fork", group="branching", usage="/fork [LABEL]")
def fork(repl: Repl, line: CommandLine) -> None:
    """Start a new branch here and move to it; the old branch stays as it is."""
    repl.cursor = repl.cursor.fork(line.text)
    # Say the way back: there is no /back, and the old branch is not where /leaf leads
    # from the new one.
    render.print_ok(
        repl.console,
        f"on a new branch {short(repl.cursor.node_id)}; ask away (/up goes back to where "
        "you forked, /tree shows both)",
    )


@command("batch", group="branching", usage="/batch PROMPT | PROMPT | ...")
async def batch(repl: Repl, line: CommandLine) -> None:
    """Ask several prompts at once, one branch each, generated as one engine batch."""
    prompts = [p.strip() for p in line.require_text("prompts separated by |").split("|")]
    prompts = [p for p in prompts if p]
    if len(prompts) < 2:
        raise UsageError("give at least two prompts separated by |")
    position.require_adapters(repl)
    kids = await repl.cursor.abatch(prompts, on_event=repl.reply_logprobs.observe)
    # One block per branch, as /history shows an exchange: the replies in the cells of
    # a table got a column each, a few letters wide at 40 columns, and a reply of 256
    # tokens ran to hundreds of lines of one word each.
    for i, (prompt, kid) in enumerate(zip(prompts, kids, strict=True), start=1):
        head = Text(f"{i} ", style="bold") + Text(short(kid.node_id), style="mp13.info")
        repl.console.print(head + Text(" you: ", style="bold cyan") + Text(prompt))
        turn = kid.turn
        if turn is not None:
            render.print_reply(repl.console, turn.text, markdown=repl.config.markdown)
            repl.console.print(footer(turn, repl.reply_logprobs.get(kid.node_id)))
    render.print_info(repl.console, "/goto NODE to continue one of them")


@command("try", group="branching", usage="/try [LABEL]")
def try_(repl: Repl, line: CommandLine) -> None:
    """Open a try-out branch; /promote makes it the main line, /close drops it."""
    repl.cursor = repl.cursor.try_out(f"try-out {line.text}".strip())
    render.print_ok(repl.console, "in a try-out: /promote keeps it, /close drops it")


@command("promote", group="branching")
def promote(repl: Repl, line: CommandLine) -> None:
    """Make the current try-out the main line and continue from its end."""
    repl.cursor = position.require_tryout(repl).promote()
    render.print_ok(repl.console, "try-out promoted: it is the main line now")
    _say_if_still_in_a_tryout(repl)
    show_here(repl)


@command("close", group="branching")
def close(repl: Repl, line: CommandLine) -> None:
    """Drop the current try-out (archived, still in /tree) and go back where it started."""
    tryout = position.require_tryout(repl)
    tryout.close()
    repl.cursor = tryout.origin
    render.print_ok(
        repl.console, "try-out closed (archived: /tree all shows it); back where it started"
    )
    _say_if_still_in_a_tryout(repl)
    show_here(repl)


def _say_if_still_in_a_tryout(repl: Repl) -> None:
    """After /promote or /close of a try-out opened inside another one: the prompt says
    "try", and this says why (the outer one is still open)."""
    if isinstance(repl.cursor, TryOut):
        render.print_info(
            repl.console, "still in the try-out this one was opened in: /promote or /close it too"
        )


def _same_reply_reason(repl: Repl) -> str | None:
    """Why a retry on this branch gives the same reply again, and how to change that;
    None when it samples without a fixed seed."""
    request = repl.cursor.request()
    if not request.sampling:
        return (
            "decoding is greedy (do_sample is off), so the same prompt always gives the "
            "same reply; /set do_sample on and /set temperature 0.8 sample a different one"
        )
    if request.seed is not None:
        return (
            f"seed {request.seed} makes sampling repeat itself; /unset seed gives a new "
            "reply each time"
        )
    return None


def _content(turn: Turn) -> tuple[str, list[tuple[str, object]]]:
    # Tool-call ids are generated per reply; the calls themselves are name + arguments.
    return turn.text, [(c.name, c.arguments) for c in turn.tool_calls]


@command("retry", group="branching")
async def retry(repl: Repl, line: CommandLine) -> None:
    """Generate a new reply to the last message, as a sibling of the old reply.

    Under greedy decoding (the default) the new reply equals the old one; /retry then
    says so and how to sample instead (/set do_sample on)."""
    old = [t for t in repl.cursor.exchange() if t.role is Role.ASSISTANT]
    turn = await run_exchange(repl, lambda view: repl.cursor.aretry(on_event=view))
    if not old or turn is None or turn.cancelled or turn.error:
        return
    if _content(turn) == _content(old[-1]):
        reason = _same_reply_reason(repl)
        if reason is not None:
            render.print_info(repl.console, f"same reply as before: {reason}")


@command("continue", group="branching", aliases=("cont",))
async def continue_(repl: Repl, line: CommandLine) -> None:
    """Continue the last reply (e.g. one cut at max_new_tokens) in the same message."""
    turn = await run_exchange(repl, lambda view: repl.cursor.acontinue(on_event=view))
    if (
        turn is not None  # the whole joined message: its metrics are the continuation's
        and turn.metrics is not None
        and turn.metrics.completion_tokens == 0
        and not turn.tool_calls
        and turn.finish_reason is FinishReason.STOP
    ):
        # A bare "0 tokens · stop" reads like a failure; say why and what /continue is for.
        render.print_info(
            repl.console,
            "the model had nothing to add: that reply had ended (stop); /continue goes on "
            "with a reply cut at max_new_tokens, /retry asks for a new one",
        )


@command("trim", group="branching", usage="/trim [N]")
def trim(repl: Repl, line: CommandLine) -> None:
    """Drop the last N exchanges (default 1) from this branch; settings stay."""
    n = parse_int(line.text or "1", "N", minimum=1)
    repl.cursor.trim(n)
    show_here(repl)


@command("messages", group="branching")
def messages(repl: Repl, line: CommandLine) -> None:
    """Show exactly the messages the model will see next (JSON)."""
    text = json.dumps(repl.cursor.messages(), indent=2, ensure_ascii=False, default=str)
    repl.console.print(Panel(Text(text), title="messages", title_align="left"))


COMMANDS: tuple[Command[Repl], ...] = (
    tree,
    goto,
    up,
    down,
    next_,
    prev,
    leaf,
    history,
    fork,
    batch,
    try_,
    promote,
    close,
    retry,
    continue_,
    trim,
    messages,
)
