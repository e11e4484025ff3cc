# SPDX-License-Identifier: MIT
"""Builtin tools, registered through the same public ``Toolbox.register`` a user calls.

- ``calculator(expression)``: arithmetic through an AST whitelist (no ``eval``):
  numbers, ``+ - * / // % **``, unary signs, parentheses, a few ``math``
  functions and constants. Exponents and result sizes are bounded, so no
  expression can hang the process or exhaust memory.
- ``current_time(timezone=None)``: the current date and time as ISO 8601 text,
  in an IANA time zone (``zoneinfo``) or the machine's local zone.
- ``tool_help(name=None)``: the guide pattern. It lists the tools callable in
  the caller's view, including SILENT ones, or explains one tool. Advertise
  ``tool_help`` and keep rarely used tools silent: the prompt stays short and
  the model can still discover and call them.

``BUILTINS`` is a read-only name -> function map; ``Toolbox.add_builtins``
registers from it. A builtin reads the toolbox only through ``ToolContext``, so
this module does not know the ``Toolbox`` class.
"""

from __future__ import annotations

import ast
import datetime as _dt
import json
import math
import operator
import types
import zoneinfo
from collections.abc import Callable
from typing import Any

from mp13_toolbox._context import ToolContext
from mp13_toolbox._errors import ToolboxError, UnknownToolError

_MAX_EXPRESSION = 2_000
_MAX_BITS = 4_096  # integers larger than this (about 1,233 digits) are refused
_MAX_EXPONENT = 10_000

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "floor": math.floor,
    "ceil": math.ceil,
    "factorial": math.factorial,
}
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}


class CalculatorError(ToolboxError, ValueError):
    """An expression the calculator refuses; the message says what to change."""


def _check_size(value: Any) -> Any:
    if isinstance(value, int) and value.bit_length() > _MAX_BITS:
        raise CalculatorError("the result is too large (over ~1,200 digits); use smaller numbers")
    return value


def _power(base: Any, exp: Any) -> Any:
    if isinstance(exp, (int, float)) and abs(exp) > _MAX_EXPONENT:
        raise CalculatorError(f"exponent {exp} is too large; keep it within ±{_MAX_EXPONENT}")
    exact = isinstance(base, int) and isinstance(exp, int) and exp > 0
    if exact and base not in (-1, 0, 1) and exp * max(base.bit_length() - 1, 1) > _MAX_BITS:
        raise CalculatorError("the result is too large (over ~1,200 digits); use smaller numbers")
    return operator.pow(base, exp)


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        return _check_size(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise CalculatorError(
            f"unknown name {node.id!r}; constants: {', '.join(_CONSTANTS)}; "
            f"functions: {', '.join(_FUNCTIONS)}"
        )
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fn = _FUNCTIONS.get(node.func.id)
        if fn is None:
            raise CalculatorError(
                f"unknown function {node.func.id!r}; available: {', '.join(_FUNCTIONS)}"
            )
        args = [_eval(a) for a in node.args]
        if fn is math.factorial and args and isinstance(args[0], int) and args[0] > 400:
            raise CalculatorError("factorial is limited to n <= 400")
        return _check_size(fn(*args))
    raise CalculatorError(
        f"{type(node).__name__} is not allowed; use numbers, + - * / // % **, parentheses "
        "and the listed functions"
    )


def _format_number(value: Any) -> str:
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return format(value, ".15g")
    return str(value)


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and safely.

    Supports numbers, + - * / // % ** (or ^; bounded exponents), parentheses, the
    constants pi, e, tau and the functions abs, round, min, max, sqrt, exp,
    log, log10, log2, sin, cos, tan, asin, acos, atan, floor, ceil, factorial.

    Args:
        expression: The expression, e.g. "2 * (3 + 4) ** 2" or "sqrt(2) / 3".
    """
    text = expression.strip().replace("^", "**")
    if not text:
        raise CalculatorError("the expression is empty; pass e.g. '2 + 2'")
    if len(text) > _MAX_EXPRESSION:
        raise CalculatorError(f"the expression is longer than {_MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, RecursionError, ValueError) as exc:
        raise CalculatorError(f"cannot parse {expression!r}: {exc.__class__.__name__}") from exc
    try:
        return _format_number(_eval(tree))
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result overflows a float; use smaller numbers") from None
    except RecursionError:
        raise CalculatorError("the expression is nested too deeply") from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, CalculatorError):
            raise
        raise CalculatorError(f"math error: {exc}") from None


def _zone_name(text: str) -> str:
    """The IANA name ``text`` means: models write "utc" or "europe/paris", and IANA
    names are case-sensitive (files on disk); an exact name is used as given."""
    try:
        zoneinfo.ZoneInfo(text)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        wanted = text.replace(" ", "_").casefold()
        for name in zoneinfo.available_timezones():
            if name.casefold() == wanted:
                return name
    return text


def current_time(timezone: str | None = None) -> str:
    """The current date and time as ISO 8601 text.

    Args:
        timezone: An IANA time zone such as "Europe/Paris" or "UTC"; the machine's
            local time zone when omitted.
    """
    if timezone is None or not timezone.strip():
        now = _dt.datetime.now().astimezone()
    else:
        try:
            zone = zoneinfo.ZoneInfo(_zone_name(timezone.strip()))
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(
                f"unknown time zone {timezone!r}; use an IANA name like 'Europe/Paris', "
                "'America/New_York' or 'UTC'"
            ) from exc
        now = _dt.datetime.now(zone)
    return now.replace(microsecond=0).isoformat()


def tool_help(ctx: ToolContext, name: str | None = None) -> str:
    """List the tools you can call, or explain one tool and its arguments.

    Args:
        name: The tool to explain; omit it to list all tools you can call.
    """
    view, tb = ctx.view, ctx.toolbox
    callable_names = [n for n in tb.names() if view.callable(n)]
    if name is None or not name.strip():
        lines = ["Tools you can call (use tool_help with a name for details):"]
        for n in callable_names:
            summary = (tb.get(n).description or "").strip().splitlines()
            lines.append(f"- {n}: {summary[0] if summary else '(no description)'}")
        return "\n".join(lines)
    name = name.strip()
    if name not in callable_names:
        raise UnknownToolError(
            f"no tool named {name!r} can be called here; callable tools: "
            f"{', '.join(callable_names) or 'none'}"
        )
    info = tb.get(name)
    params = info.spec.parameters
    return (
        f"{name}: {info.description or '(no description)'}\n"
        f"Arguments (JSON schema): {json.dumps(params, ensure_ascii=False)}"
    )


BUILTINS: types.MappingProxyType[str, Callable[..., str]] = types.MappingProxyType(
    {"calculator": calculator, "current_time": current_time, "tool_help": tool_help}
)
