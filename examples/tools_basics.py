# SPDX-License-Identifier: MIT
"""mp13_toolbox in five minutes, no model needed: register, scope, execute, approve, save.

Run: python examples/tools_basics.py
"""

from __future__ import annotations

import asyncio
import enum

from mp13_toolbox import (
    ApprovalRequest,
    Toolbox,
    ToolboxSnapshot,
    ToolBudget,
    ToolCall,
    ToolsScope,
)


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


def convert_temperature(value: float, to: Unit = Unit.FAHRENHEIT) -> str:
    """Convert a temperature given in the other unit.

    Args:
        value: The temperature to convert.
        to: The unit to convert to.
    """
    out = value * 9 / 5 + 32 if to is Unit.FAHRENHEIT else (value - 32) * 5 / 9
    return f"{out:.1f} {to.value}"


def delete_file(path: str) -> str:
    """Delete a file (pretend).

    Args:
        path: The file to delete.
    """
    return f"deleted {path}"


def main() -> None:
    tb = Toolbox(builtins=True)  # calculator, current_time, tool_help
    tb.register(convert_temperature)
    tb.register(delete_file, risk="high")  # high risk: asks for approval by default

    # 1. Scopes: keep rarely used tools silent; tool_help lets the model discover them.
    view = tb.view(
        [ToolsScope({"*": "silent", "tool_help": "advertised", "calculator": "advertised"})]
    )
    print("advertised:", [s["function"]["name"] for s in tb.specs(view)])
    print("silent:    ", view.silent())

    # 2. Execute calls the way a parser hands them over (arguments are a dict).
    calls = [
        ToolCall("calculator", {"expression": "2 * (3 + 4) ** 2"}, id="1"),
        ToolCall("convert_temperature", {"value": 100}, id="2"),
        ToolCall("convert_temperature", {"value": "hot"}, id="3"),  # bad argument
        ToolCall("web_search", {"q": "mp13"}, id="4"),  # unknown tool
    ]
    for call in calls:
        r = tb.execute(call, view)
        print(f"{call.name:>20} -> {'ERROR ' if r.is_error else ''}{r.content}")

    # 3. Approval: the approver answers yes / no / always / never.
    def approver(req: ApprovalRequest) -> str:
        print(f"   approve {req.call.name}({req.call.arguments}) [{req.risk.value}]? -> always")
        return "always"

    r = tb.execute(ToolCall("delete_file", {"path": "/tmp/x"}), view, approval=approver)
    remembered = {name: answer.value for name, answer in tb.remembered().items()}
    print(f"{'delete_file':>20} -> {r.content}; remembered: {remembered}")

    # 4. Per-turn budget inside an async runner: one round of parallel calls.
    async def one_turn() -> None:
        budget = ToolBudget(max_calls=3, max_rounds=2).start()
        budget.start_round()
        round_calls = [ToolCall("calculator", {"expression": f"{i} ** 2"}) for i in range(4)]
        results = await tb.aexecute_many(round_calls, view, budget=budget)
        print("budgeted round:", [r.content if not r.is_error else "refused" for r in results])

    asyncio.run(one_turn())

    # 5. State (no callables) round-trips through JSON; callables relink by name.
    saved = tb.snapshot().to_json()
    restored = Toolbox.from_snapshot(
        ToolboxSnapshot.from_json(saved), functions=[convert_temperature]
    )
    print("restored tools:", restored.names(), "unresolved:", restored.unresolved())


if __name__ == "__main__":
    main()
