# SPDX-License-Identifier: MIT
"""A process that writes a session file forever, for the ``kill -9`` campaign.

``python tests/hardening/_session_writer.py DB LOG SEED``: opens the session ``DB``,
prints ``ready``, then appends turns, tool rounds, commands, forks and titles at
random, and after each change has committed writes what it made to ``LOG`` (``conv
ID`` / ``node ID`` lines, line-buffered). Whatever ``LOG`` names was committed before
the line was written, so after a kill every logged id must be in the file.
"""

from __future__ import annotations

import random
import sys

from mp13_context import ChatContext, Role, Session, Turn
from mp13_context.testing import FakeEngine
from mp13_toolbox import ToolCall, ToolResult, ToolsScope


def main(db: str, log_path: str, seed: int) -> None:
    rng = random.Random(seed)
    session = Session.open(db)
    ctx = ChatContext(session, engine=FakeEngine())
    conversations = [c.id for c in session.conversations()]
    log = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (killed, never closed)
    print("ready", flush=True)
    while True:
        pick = rng.random()
        if pick < 0.1 or not conversations:
            cur = ctx.cursor()
            conversations.append(cur.conversation_id)
            log.write(f"conv {cur.conversation_id}\n")
            continue
        cur = ctx.cursor(rng.choice(conversations))
        if pick < 0.5:
            cur.ask("hello " * rng.randint(1, 200) + "caf\udce9")
            log.write(f"node {cur.node_id}\n")
        elif pick < 0.7:
            call = ToolCall("f", {"a": 1}, id="c1")
            result = ToolResult(name="f", content="r" * rng.randint(1, 100_000), call_id="c1")
            turns = [
                Turn(role=Role.USER, text="x" * rng.randint(1, 5000)),
                Turn(role=Role.ASSISTANT, tool_calls=(call,)),
                Turn(role=Role.TOOL, tool_results=(result,)),
            ]
            nodes = session.append_turns(cur.node_id, turns)
            log.write("".join(f"node {n.id}\n" for n in nodes))
        elif pick < 0.8:
            cur.system.set("system " * rng.randint(1, 50))
            cur.tools.add(ToolsScope({"*": "silent"}))
            cur.params.set(temperature=0.5)
            log.write(f"node {cur.node_id}\n")
        elif pick < 0.9:
            fork = cur.fork()
            fork.ask("forked")
            log.write(f"node {fork.node_id}\n")
        else:
            session.set_title(cur.conversation_id, f"title {rng.random()}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
