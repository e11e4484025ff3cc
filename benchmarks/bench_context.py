# SPDX-License-Identifier: MIT
"""Context-layer benchmark: a long chain and a bushy tree of N turns (default 100,000).

    python benchmarks/bench_context.py [--turns N] [--dir DIR]

Measures, on a file session (WAL, one transaction per saved node):

- append: ms per saved turn (goal <= 1 ms), in the long chain and the bushy tree;
- fork: cost of ``cursor.fork()`` vs appending a turn, side by side;
- resolve: the effective state at the deepest leaf, the stored per-node state
  (``settings_at``) vs folding every command along the path (``recompute_settings``);
- reopen: open the file and resolve the deep leaf (goal <= 0.5 s);
- search: FTS5 search latency over every turn (goal <= 50 ms), vs a plain
  ``LIKE`` scan of the same rows.

Prints one table: value, goal, value/goal (<= 1 meets the goal) and the
side-by-side ratio where there is a baseline. Absolute times depend on the
machine; the ratios are what to compare.
"""

from __future__ import annotations

import pathlib
import random
import statistics
import tempfile
import time

import sqlean
from _bench_engine_common import new_parser, run_benchmark

from mp13_context import ChatContext, Command, CommandKind, NodeKind, Role, Session, Turn
from mp13_context.testing import FakeEngine

WORDS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "river",
    "mountain",
    "cloud",
    "engine",
    "adapter",
    "token",
    "branch",
    "forest",
    "window",
    "signal",
    "vector",
    "matrix",
    "garden",
    "letter",
    "number",
    "planet",
    "orbit",
)


def text(rng: random.Random, i: int) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(12))
    # one rare marker every 1000 turns, so a selective search has a few dozen hits
    return f"{words} turn{i}" + (" zebracorn" if i % 1000 == 0 else "")


def median_time(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build_chain(session: Session, n: int, rng: random.Random) -> tuple[str, float]:
    """n turns in one line (user/assistant alternating; a command every 500 turns)."""
    info = session.new_conversation("chain")
    at = info.root_id
    t0 = time.perf_counter()
    for i in range(n):
        role = Role.USER if i % 2 == 0 else Role.ASSISTANT
        commands = ()
        if i % 500 == 0:
            commands = (Command(kind=CommandKind.PARAMS_SET, params={"seed": i}),)
        if i % 5000 == 0:
            commands += (Command(kind=CommandKind.SYSTEM_ADD, text=f"rule {i}"),)
        if commands:
            at = session.append(at, NodeKind.PLACEHOLDER, commands=commands).id
        at = session.append(at, NodeKind.TURN, Turn(role=role, text=text(rng, i))).id
    return at, (time.perf_counter() - t0) / n


def build_bushy(session: Session, n: int, rng: random.Random) -> tuple[str, float]:
    """n turns in a tree: each new turn hangs under a random recent node (many branches)."""
    info = session.new_conversation("bushy")
    nodes = [info.root_id]
    deepest, depth = info.root_id, 0
    depths = {info.root_id: 0}
    t0 = time.perf_counter()
    for i in range(n):
        parent = nodes[-1] if rng.random() < 0.7 else rng.choice(nodes[-200:])
        role = Role.USER if depths[parent] % 2 == 0 else Role.ASSISTANT
        node = session.append(parent, NodeKind.TURN, Turn(role=role, text=text(rng, i)))
        nodes.append(node.id)
        depths[node.id] = depths[parent] + 1
        if depths[node.id] > depth:
            deepest, depth = node.id, depths[node.id]
    return deepest, (time.perf_counter() - t0) / n


def fork_vs_append(session: Session, leaf: str, k: int = 300) -> tuple[float, float]:
    ctx = ChatContext(session, engine=FakeEngine())
    cur = ctx.cursor(at=leaf)
    t0 = time.perf_counter()
    for _ in range(k):
        cur.fork()
    fork = (time.perf_counter() - t0) / k
    turn = Turn(role=Role.USER, text="x")
    t0 = time.perf_counter()
    for _ in range(k):
        session.append(leaf, NodeKind.TURN, turn)
    append = (time.perf_counter() - t0) / k
    return fork, append


def main(argv: list[str] | None = None) -> None:
    ap = new_parser(__doc__)
    ap.add_argument("--turns", type=int, default=100_000, help="turns per tree (default 100000)")
    ap.add_argument("--dir", type=pathlib.Path, default=None, help="where to put the session file")
    run_benchmark(ap, measure, argv, models=False, pin_torch=False)


def measure(args) -> None:
    n = args.turns
    folder = args.dir or pathlib.Path(tempfile.mkdtemp(prefix="mp13-bench-context-"))
    path = folder / "bench.db"
    rng = random.Random(0)

    session = Session.open(path)
    chain_leaf, chain_ms = build_chain(session, n, rng)
    bushy_leaf, bushy_ms = build_bushy(session, n, rng)
    fork_s, append_s = fork_vs_append(session, chain_leaf)
    session.close()

    def reopen_and_resolve() -> None:
        s = Session.open(path)
        s.settings_at(chain_leaf)
        s.close()

    reopen_s = median_time(reopen_and_resolve)
    session = Session.open(path)
    depth = session.node(chain_leaf).depth
    resolve_s = median_time(lambda: (session.refresh(), session.settings_at(chain_leaf)))
    chain_root = session.path(chain_leaf)[0].id
    leaf_s = median_time(lambda: (session.refresh(), session.leaf(chain_root)), 3)
    bushy_depth = session.node(bushy_leaf).depth
    bushy_s = median_time(lambda: (session.refresh(), session.settings_at(bushy_leaf)))
    fold_s = median_time(lambda: (session.refresh(), session.recompute_settings(chain_leaf)), 3)
    assert session.settings_at(chain_leaf).params == session.recompute_settings(chain_leaf).params
    search_rare = median_time(lambda: session.search("zebracorn"))
    search_common = median_time(lambda: session.search("river mountain", limit=20))
    hits = len(session.search("zebracorn", limit=1000))
    session.close()
    conn = sqlean.connect(str(path))
    like_s = median_time(
        lambda: conn.execute(
            "SELECT id FROM nodes WHERE turn LIKE '%zebracorn%' LIMIT 20"
        ).fetchall(),
        3,
    )
    conn.close()

    rows = [
        ("append, chain (ms/turn)", chain_ms * 1e3, 1.0, None, ""),
        ("append, bushy tree (ms/turn)", bushy_ms * 1e3, 1.0, None, ""),
        ("fork (ms)", fork_s * 1e3, None, append_s * 1e3, "append a turn (ms)"),
        (
            f"resolve leaf at depth {depth} (ms)",
            resolve_s * 1e3,
            None,
            fold_s * 1e3,
            "fold all commands (ms)",
        ),
        (f"resolve bushy leaf at depth {bushy_depth} (ms)", bushy_s * 1e3, None, None, ""),
        ("reopen + resolve leaf (s)", reopen_s, 0.5, None, ""),
        ("find the chain's leaf from its root (ms)", leaf_s * 1e3, None, None, ""),
        (
            f"search rare word, {hits} hits (ms)",
            search_rare * 1e3,
            50.0,
            like_s * 1e3,
            "LIKE scan (ms)",
        ),
        ("search two common words (ms)", search_common * 1e3, 50.0, None, ""),
    ]
    print(f"mp13_context benchmark: {n} turns per tree, file {path}")
    head = (
        f"{'metric':<42} {'value':>9} {'goal':>6} {'value/goal':>10} {'baseline':>9} {'ratio':>9}"
    )
    print(f"{head}  baseline is")
    for name, value, goal, base, what in rows:
        g = f"{goal:g}" if goal else "-"
        vg = f"{value / goal:.3f}" if goal else "-"
        b = f"{base:.3f}" if base is not None else "-"
        r = f"{value / base:.2e}" if base else "-"
        print(f"{name:<42} {value:>9.3f} {g:>6} {vg:>10} {b:>9} {r:>9}  {what}")


if __name__ == "__main__":
    main()
