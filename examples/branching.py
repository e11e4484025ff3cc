# SPDX-License-Identifier: MIT
"""Branching conversations: fork, try out, retry, continue, batch, search and replay.

    python examples/branching.py            # scripted fake engine, instant
    python examples/branching.py --real     # a tiny random-weight model built offline

With ``--real`` the replies are gibberish (random weights); what matters is the
tree: every branch keeps its own system message, parameters and turns, and a
replay on the same greedy engine reproduces every reply.
"""

from __future__ import annotations

import argparse
import tempfile

from mp13_context import ChatContext, Session, replay
from mp13_context.testing import FakeEngine


def make_engine(real: bool):
    if not real:
        return FakeEngine()
    from mp13_engine import Engine
    from mp13_engine.testing import build_tiny_model

    path = build_tiny_model(tempfile.mkdtemp(prefix="mp13-example-"), family="chatml")
    return Engine.load(str(path), device="cpu", dtype="float32")


def show(title: str, cur) -> None:
    print(f"--- {title}")
    for m in cur.messages():
        print(f"  {m['role']:>9}: {m['content'][:70]!r}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--real", action="store_true", help="use a tiny real model instead of a fake")
    args = ap.parse_args(argv)
    engine = make_engine(args.real)
    db = tempfile.mkdtemp(prefix="mp13-example-") + "/chats.db"
    session = Session.open(db)
    ctx = ChatContext(session, engine=engine)

    cur = ctx.cursor(title="planning a trip")
    cur.system.set("You are a concise travel agent.")
    cur.params.set(max_new_tokens=16)
    cur.ask("Where should I go in spring?")

    # A fork: a different persona on its own branch; `cur` is unaffected.
    pirate = cur.fork("pirate")
    pirate.system.set("You are a pirate.")
    pirate.ask("And in autumn?")
    cur.ask("And in autumn?")
    show("main branch", cur)
    show("pirate branch", pirate)

    # A try-out: explore, then promote it to the main line (cur follows) or close it.
    t = cur.try_out()
    t.params.set(temperature=0.9, do_sample=True, seed=7)
    t.ask("Surprise me.")
    t.close()  # archived; cur never moved

    # Retry: a new sibling reply to the last question.
    first = cur.node.turn.text
    again = cur.retry()
    print(f"--- retry: {len(cur.siblings())} replies to the last question")
    print(f"  first: {first[:50]!r}\n  again: {again.text[:50]!r}")

    # A batch: three questions from the same point, generated together.
    kids = cur.batch(["Trains?", "Ferries?", "Flights?"])
    print("--- batch:", [k.turn.text[:30] for k in kids])

    # Search across everything saved so far (the file is saved as you go).
    hits = session.search("autumn")
    print(f"--- search 'autumn': {len(hits)} hits, e.g. {hits[0].snippet!r}")

    # Replay the main branch into a new conversation and compare.
    report = replay(cur, engine=engine)
    print(f"--- replay: {report.equal_count}/{len(report.turns)} replies identical")
    for row in report.turns:
        print(f"  {row.user_text!r}: equal={row.text_equal} similarity={row.similarity:.2f}")

    session.close()
    reopened = Session.open(db)
    print(f"--- reopened {db}: {len(reopened.conversations())} conversations")
    reopened.close()
    if args.real:
        engine.close()


if __name__ == "__main__":
    main()
