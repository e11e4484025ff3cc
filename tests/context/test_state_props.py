# SPDX-License-Identifier: MIT
"""Property test: random commands on random branches vs a simple reference model.

The reference keeps, per branch, an explicit undo stack per command family and
the list of user messages. After every step each branch's effective state and
messages must match it (branches never leak into each other), the stored state
must equal the state folded from scratch, and everything must survive a reopen.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mp13_context import ChatContext, CommandError, Session, SystemMode
from mp13_context.testing import FakeEngine
from mp13_toolbox import ToolsScope

TEXT = st.text(alphabet="abc xyz", min_size=1, max_size=6)
NAMES = st.lists(st.sampled_from(["a", "b", "c"]), max_size=2, unique=True)
SCOPE = st.builds(
    lambda m: ToolsScope(m),
    st.dictionaries(
        st.sampled_from(["*", "add", "calc"]),
        st.sampled_from(["silent", "advertised", "disabled"]),
        max_size=2,
    ),
)
PARAM = st.one_of(
    st.tuples(st.just("temperature"), st.one_of(st.none(), st.floats(0, 2))),
    st.tuples(st.just("seed"), st.one_of(st.none(), st.integers(0, 9))),
    st.tuples(st.just("max_new_tokens"), st.integers(1, 64)),
)

OPS = st.one_of(
    st.tuples(st.just("system.set"), TEXT),
    st.tuples(st.just("system.add"), TEXT),
    st.tuples(st.just("system.none"), st.none()),
    st.tuples(st.just("system.default"), st.none()),
    st.tuples(st.just("system.pop"), st.none()),
    st.tuples(st.just("adapters.set"), NAMES),
    st.tuples(st.just("adapters.add"), NAMES),
    st.tuples(st.just("adapters.default"), st.none()),
    st.tuples(st.just("adapters.pop"), st.none()),
    st.tuples(st.just("tools.set"), SCOPE),
    st.tuples(st.just("tools.add"), SCOPE),
    st.tuples(st.just("tools.reset"), st.none()),
    st.tuples(st.just("tools.pop"), st.none()),
    st.tuples(st.just("params"), PARAM),
    st.tuples(st.just("ask"), TEXT),
    st.tuples(st.just("fork"), st.none()),
    st.tuples(st.just("clone"), st.none()),
    st.tuples(st.just("try_out"), st.none()),
    st.tuples(st.just("retry"), st.none()),
    st.tuples(st.just("trim"), st.none()),
)


class Ref:
    """The reference model of one branch."""

    def __init__(self):
        self.system = [(SystemMode.DEFAULT, "")]
        self.adapters = [None]
        self.tools = [()]
        self.params = {}
        self.users = []  # (user text, snapshot of the state after it)

    def apply(self, op, arg):
        family, _, what = op.partition(".")
        if op == "params":
            name, value = arg
            if value is None:
                self.params.pop(name, None)
            else:
                self.params[name] = value
            return
        stack = getattr(self, family)
        if what == "pop":
            if len(stack) == 1:
                raise CommandError("nothing to pop")
            stack.pop()
            return
        cur = stack[-1]
        if op == "system.set":
            new = (SystemMode.TEXT, arg)
        elif op == "system.add":
            new = (
                SystemMode.TEXT,
                f"{cur[1]}\n\n{arg}" if cur[0] is SystemMode.TEXT and cur[1] else arg,
            )
        elif op == "system.none":
            new = (SystemMode.NONE, "")
        elif op == "system.default":
            new = (SystemMode.DEFAULT, "")
        elif op == "adapters.set":
            new = tuple(arg)
        elif op == "adapters.add":
            new = (cur or ()) + tuple(n for n in arg if n not in (cur or ()))
        elif op == "adapters.default":
            new = None
        elif op == "tools.set":
            new = (arg,)
        elif op == "tools.add":
            new = (*cur, arg)
        else:  # tools.reset
            new = ()
        stack.append(new)


def run_command(cur, op, arg):
    if op == "params":
        cur.params.set(**{arg[0]: arg[1]})
        return
    family, _, what = op.partition(".")
    method = getattr(getattr(cur, family), what)
    if what in ("set", "add"):
        method(arg)
    else:
        method()


def check(cur, ref, session):
    state = session.settings_at(cur.node_id)
    assert (state.system.mode, state.system.text) == ref.system[-1]
    assert state.adapters == ref.adapters[-1]
    assert state.tool_scopes == ref.tools[-1]
    assert state.params == ref.params
    again = session.recompute_settings(cur.node_id)
    assert (again.system, again.adapters, again.tool_scopes, again.params) == (
        state.system,
        state.adapters,
        state.tool_scopes,
        state.params,
    )
    users = [m["content"] for m in session.messages(cur.node_id) if m["role"] == "user"]
    assert users == [u for u, _ in ref.users]


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(st.tuples(st.integers(0, 7), OPS), min_size=5, max_size=30))
def test_random_commands_on_random_branches_match_the_reference(tmp_path_factory, steps):
    path = tmp_path_factory.mktemp("prop") / "s.db"
    session = Session.open(path)
    ctx = ChatContext(session, engine=FakeEngine())
    branches = [(ctx.cursor(), Ref())]
    for pick, (op, arg) in steps:
        cur, ref = branches[pick % len(branches)]
        if op == "ask":
            cur.ask(arg)
            ref.users.append((arg, None))
        elif op == "retry":
            if not ref.users:
                continue
            cur.retry()  # a new reply: same user turns, commands given since still apply
        elif op in ("fork", "clone", "try_out"):
            branches.append((getattr(cur, op)(), copy.deepcopy(ref)))
        elif op == "trim":
            if not ref.users:
                continue
            cur.trim(1)
            ref.users.pop()
        else:
            expect_error = False
            try:
                ref.apply(op, arg)
            except CommandError:
                expect_error = True
            if expect_error:
                with pytest.raises(CommandError):
                    run_command(cur, op, arg)
            else:
                run_command(cur, op, arg)
        for c, r in branches:
            check(c, r, session)
    session.close()
    reopened = Session.open(path)
    for c, r in branches:
        check(c, r, reopened)
    reopened.close()
