# SPDX-License-Identifier: MIT
"""Check tool arguments against a JSON schema, with messages a model can act on.

``validate(schema, value)`` returns ``(value, problems)``. Each problem names the
argument (``items[2].name``), what was expected and what was received, e.g.
``argument 'n': expected integer, got string "5"``. The supported keywords
(JSON schema draft 2020-12, with its meanings) are the ones ``_schema`` emits
plus the common ones found in hand-written specs:
``type`` (a name or a list; ``1.0`` is an integer, ``true`` is not), ``enum``
and ``const`` (JSON equality: ``1`` equals ``1.0``, ``true`` is not ``1``),
``properties``, ``required``, ``additionalProperties`` (bool or schema),
``minProperties``/``maxProperties``, ``items``, ``prefixItems``,
``minItems``/``maxItems``, ``uniqueItems``, ``anyOf`` (at least one),
``oneOf`` (exactly one), ``allOf``, ``not``, ``$ref`` to a part of the same
schema (``#``, ``#/$defs/name``; recursive definitions work),
``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``,
``multipleOf`` (exact on the decimal the JSON wrote: ``0.3`` is a multiple of
``0.1``), ``minLength``/``maxLength`` (in code points, as Python counts a
``str``) and ``pattern`` (ECMA-262, as the spec says: found anywhere in the
string, not anchored; ``$`` is the very end, ``\\d``/``\\w`` ASCII), and the
boolean schemas ``true``/``false``. ``NaN`` and ``Infinity`` (which Python's
``json`` reads) are not JSON numbers: refused. Annotations are not checked:
``format`` (2020-12 makes it an annotation), ``default`` (not filled in: a
function tool's Python default applies, an external handler gets only what
was sent), ``title``, ``description``, ``examples``. Other keywords that
constrain values (``if``, ``patternProperties``, ``contains``...) are refused
when an external tool is registered (``_spec_check``), so one never passes
unchecked. Keywords JSON schema does not define are ignored (JSON-schema
semantics), and so is a known keyword whose value has the wrong type
(``"required": 5``, ``"properties": []``, ``"minLength": "3"``): that is
the spec's fault, not the call's, so foreign specs never make a tool uncallable.

Hand-written specs are often in older forms, checked as their authors meant them:
Draft 4 / OpenAPI 3.0 ``"exclusiveMinimum": true`` (or ``Maximum``) beside
``minimum`` makes that bound strict; OpenAPI 3.0's ``"nullable": true`` accepts
``null`` wherever it stands; ``"items": [...]`` (a list: one schema per position,
``additionalItems`` for the rest) is a tuple; ``"$ref": "#/definitions/X"`` names
``definitions`` as ``#/$defs/X`` names ``$defs`` (any local JSON pointer is followed).

The only conversion is the lossless one JSON itself blurs: an integral float
(``3.0``) where an ``integer`` is expected becomes ``3``. Nothing else is
coerced: a wrong type is reported so the model can correct its call.

Validation is bounded, whatever the model sends (arguments are untrusted):

- **Time**: one call's validation may take ``budget_s`` seconds (default
  ``DEFAULT_BUDGET_S``; the toolbox passes at most the tool's timeout and
  counts the time spent against it). Past the budget, checking stops with a
  problem that asks for smaller arguments.
- **Patterns** are matched with the ``regex`` module (``re``-compatible syntax),
  whose matching takes a timeout (``re`` has none, and a thread cannot stop it:
  it holds the GIL): a pattern that backtracks catastrophically on a value
  (``^(a|a)*$`` on 26 characters runs for minutes under ``re``) stops when the
  budget is spent and the value is rejected with a message saying so. ``regex``
  counts the CPU time of matching, so on a loaded machine the wall time can be
  somewhat longer. A pattern that does not compile is the spec's fault, not the
  call's: ignored.
- **Depth**: values nested deeper than ``MAX_DEPTH`` levels are rejected up
  front, so nothing here or downstream (JSON encoding, budgets, converters)
  can hit Python's recursion limit.
- **Size**: every check is linear in the value; ``uniqueItems`` compares
  canonical JSON keys in a set (``1`` and ``1.0`` are equal, as JSON schema
  says; ``true`` and ``1`` are not).

JSON types and equality are ``_json_values``'; reading a ``pattern`` as ECMA-262 and
finding what a ``$ref`` names are ``_patterns``'. This module owns the keywords' meaning.
"""

from __future__ import annotations

import json
import math
import operator
import time
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

import regex

from mp13_toolbox._json_values import (
    IS_TYPE,
    canonical_json,
    is_number,
    json_equal,
    json_type,
    one_of,
)
from mp13_toolbox._patterns import ecma_pattern, resolve_ref

#: Seconds one call's validation may take by default (see the module docstring).
DEFAULT_BUDGET_S = 1.0
#: Levels of objects and arrays the arguments may nest, the arguments object included.
MAX_DEPTH = 100

_MAX_PROBLEMS = 8
# Numeric bound keyword -> (the comparison value OP bound that must hold, OP's text).
_BOUNDS: dict[str, tuple[Callable[[float, float], bool], str]] = {
    "minimum": (operator.ge, ">="),
    "maximum": (operator.le, "<="),
    "exclusiveMinimum": (operator.gt, ">"),
    "exclusiveMaximum": (operator.lt, "<"),
}
# Draft 4 / OpenAPI 3.0 spelled a strict bound as a flag beside it: {"minimum": 0,
# "exclusiveMinimum": true} means > 0 (2020-12: {"exclusiveMinimum": 0}).
_DRAFT4_FLAGS = {"exclusiveMinimum": "minimum", "exclusiveMaximum": "maximum"}


def _show(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _where(path: str) -> str:
    return f"argument {path!r}" if path else "the arguments"


def check_limit(
    value: Any, kind: str, error: Callable[[str], Exception], message: str, *, zero: bool = False
) -> None:
    """A numeric setting (a cap, a timeout, a budget) is ``None`` (no limit) or a JSON
    ``kind`` above 0 (``zero``: at least 0); else ``error(f"{message}, got {value!r}")``.

    Settings are checked when set: a bad one would otherwise surface as a TypeError inside
    ``execute``, which must never raise because of its tools.
    """
    if value is not None and not (IS_TYPE[kind](value) and (value >= 0 if zero else value > 0)):
        raise error(f"{message}, got {value!r}")


def _match_type(value: Any, t: str) -> tuple[bool, Any]:
    """Whether ``value`` is JSON type ``t``; the (possibly normalised) value."""
    if t == "integer" and isinstance(value, float) and value.is_integer():
        return True, int(value)
    check = IS_TYPE.get(t)
    return (check is None or check(value)), value  # unknown type names are not enforced


def _too_deep(value: Any, limit: int) -> str | None:
    """The top-level key under which ``value`` nests deeper than ``limit``; None if it does not.

    Iterative, so it cannot itself hit the recursion limit.
    """
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        item, depth, top = stack.pop()
        children: Iterable[tuple[Any, Any]]
        if isinstance(item, dict):
            children = item.items()
        elif isinstance(item, (list, tuple)):
            children = enumerate(item)
        else:
            continue
        if depth >= limit:
            return top
        for key, child in children:
            stack.append((child, depth + 1, top if depth else str(key)))
    return None


class _Checker:
    """One validation run: its problems and its deadline."""

    def __init__(
        self, deadline: float | None, root: Any, following: set[tuple[str, int]] | None = None
    ) -> None:
        self.problems: list[str] = []
        self.deadline = deadline
        self.late = False
        self.root = root  # what a ``$ref`` resolves against: the whole parameters schema
        # (ref, id(value)) pairs being followed: a ref that comes back to itself without
        # entering the value (``{"$ref": "#"}`` at the top) is followed once, not forever
        self.following: set[tuple[str, int]] = set() if following is None else following

    def _over(self) -> bool:
        """True (once noted) when the time budget is spent: stop checking."""
        if self.late:
            return True
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.late = True
            self.problems.append(
                "the arguments took too long to check (they are very large, or a pattern "
                "backtracks too much on them); send smaller or simpler arguments"
            )
        return self.late

    def trial(self, schema: Any, value: Any, path: str) -> tuple[Any, list[str]] | None:
        """``schema`` checked on its own: ``(fixed value, its problems)``, or None when the
        time ran out (that problem is then this run's: the answer, not a mismatch)."""
        trial = _Checker(self.deadline, self.root, self.following)
        fixed = trial.check(schema, value, path)
        if trial.late:
            self.late = True
            self.problems.extend(trial.problems)
            return None
        return fixed, trial.problems

    def check_options(
        self, key: str, options: list[Any], value: Any, path: str
    ) -> tuple[bool, Any]:
        """``anyOf`` (at least one option) or ``oneOf`` (exactly one): ``(ok, value as the
        option that took it normalised it)``. An empty list is a malformed spec: ignored."""
        passed: list[tuple[int, Any]] = []
        firsts: list[str] = []
        for i, option in enumerate(options):
            outcome = self.trial(option, value, path)
            if outcome is None:
                return False, value
            fixed, found = outcome
            if found:
                firsts.append(found[0])
                continue
            passed.append((i + 1, fixed))
            if key == "anyOf" or len(passed) > 1:
                break
        if not options or len(passed) == 1:
            return True, passed[0][1] if passed else value
        if passed:
            (first, _), (second, _) = passed
            self.problems.append(
                f"{_where(path)}: {_show(value)} fits more than one of the allowed forms "
                f"(forms {first} and {second}) where exactly one must fit; send a value that "
                "fits only one"
            )
        else:
            self.problems.append(
                f"{_where(path)}: {_show(value)} matches none of the allowed forms "
                f"({'; '.join(firsts[:3])})"
            )
        return False, value

    def check(self, schema: Any, value: Any, path: str) -> Any:
        problems = self.problems
        if len(problems) >= _MAX_PROBLEMS or self._over():
            return value
        if schema is False:  # the boolean schema that nothing fits
            problems.append(f"{_where(path)}: no value is accepted here; leave it out")
            return value
        if not isinstance(schema, dict):
            return value
        if value is None and schema.get("nullable") is True:
            return value  # OpenAPI 3.0's "null is allowed here too", as its author meant
        ref = schema.get("$ref")
        if isinstance(ref, str):
            value = self.check_ref(ref, value, path)
        for key in ("anyOf", "oneOf"):
            ok, value = self.check_options(key, _list(schema.get(key)), value, path)
            if not ok:
                return value
        if isinstance(schema.get("not"), (dict, bool)):
            outcome = self.trial(schema["not"], value, path)
            if outcome is None:
                return value
            if not outcome[1]:
                problems.append(
                    f"{_where(path)}: {_show(value)} is excluded (it matches "
                    f"{_show(schema['not'])}, which the schema forbids); send another value"
                )
                return value
        for sub in _list(schema.get("allOf")):
            value = self.check(sub, value, path)
        t = schema.get("type")
        if t is not None:
            names = t if isinstance(t, list) else [t]
            for name in names:
                ok, fixed = _match_type(value, name)
                if ok:
                    value = fixed
                    break
            else:
                expected = " or ".join(names)
                # null is its own value: "got null", not "got null null"
                got = "null" if value is None else f"{json_type(value)} {_show(value)}"
                problems.append(f"{_where(path)}: expected {expected}, got {got}")
                return value
        enum = schema.get("enum")
        if isinstance(enum, list) and not one_of(value, enum):
            allowed = ", ".join(_show(v, 30) for v in enum)
            problems.append(f"{_where(path)}: {_show(value)} is not one of: {allowed}")
            return value
        if "const" in schema and not json_equal(value, schema["const"]):
            problems.append(f"{_where(path)}: must be {_show(schema['const'])}, got {_show(value)}")
            return value
        if isinstance(value, dict):
            return self.check_object(schema, value, path)
        if isinstance(value, (list, tuple)):
            return self.check_array(schema, list(value), path)
        if isinstance(value, str):
            self.check_string(schema, value, path)
        elif is_number(value):
            self.check_number(schema, value, path)
        return value

    def check_ref(self, ref: str, value: Any, path: str) -> Any:
        """A local ``$ref`` checked, like every keyword, alongside its siblings."""
        target = resolve_ref(self.root, ref)
        key = (ref, id(value))
        if target is None or key in self.following:
            return value  # refused when the tool was registered; a cycle adds nothing
        self.following.add(key)
        try:
            return self.check(target, value, path)
        finally:
            self.following.discard(key)

    def check_object(
        self, schema: dict[str, Any], value: dict[str, Any], path: str
    ) -> dict[str, Any]:
        problems = self.problems
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        result = dict(value)
        self.check_length(schema, len(value), path, "Properties", "properties")
        missing = [
            k for k in _list(schema.get("required")) if isinstance(k, str) and k not in value
        ]
        for key in missing:
            sub = props.get(key)
            if isinstance(sub, dict) and isinstance(sub.get("$ref"), str) and "type" not in sub:
                sub = resolve_ref(self.root, sub["$ref"])  # name the kind the ref says
            kind = sub.get("type", "value") if isinstance(sub, dict) else "value"
            where = _where(_join(path, key))
            problems.append(f"{where} is required ({_kind(kind)}) but was not given")
        extra = schema.get("additionalProperties", True)
        extra = extra if isinstance(extra, (bool, dict)) else True
        for key, item in value.items():
            sub_path = _join(path, key)
            if key in props:
                result[key] = self.check(props[key], item, sub_path)
            elif extra is False:
                known = ", ".join(props) or "none"
                problems.append(f"{_where(sub_path)} is not accepted; accepted arguments: {known}")
            elif isinstance(extra, dict):
                result[key] = self.check(extra, item, sub_path)
        return result

    def check_length(
        self, schema: dict[str, Any], n: int, path: str, keyword: str, unit: str
    ) -> None:
        """``min{keyword}``/``max{keyword}`` (``Items``, ``Length``) against a length ``n``."""
        low, high = _bound(schema.get(f"min{keyword}")), _bound(schema.get(f"max{keyword}"))
        if low is not None and n < low:
            self.problems.append(f"{_where(path)}: needs at least {low} {unit}, got {n}")
        if high is not None and n > high:
            self.problems.append(f"{_where(path)}: takes at most {high} {unit}, got {n}")

    def check_array(self, schema: dict[str, Any], value: list[Any], path: str) -> list[Any]:
        self.check_length(schema, len(value), path, "Items", "items")
        prefix = _list(schema.get("prefixItems"))
        items = schema.get("items")
        if isinstance(items, list) and not prefix:
            # Draft 4 to 2019-09 tuples: "items" a list of schemas, one per position, and
            # "additionalItems" for the rest (2020-12: "prefixItems" and "items")
            prefix, items = items, schema.get("additionalItems")
        result = list(value)
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else items
            if isinstance(sub, (dict, bool)):
                result[i] = self.check(sub, item, f"{path}[{i}]")
        if schema.get("uniqueItems") is True and not self._over():
            seen: set[str] = set()
            for item in result:
                key = canonical_json(item)
                if key in seen:
                    twice = f"{_show(item)} appears twice"
                    self.problems.append(f"{_where(path)}: items must be unique, {twice}")
                    break
                seen.add(key)
        return result

    def check_string(self, schema: dict[str, Any], value: str, path: str) -> None:
        self.check_length(schema, len(value), path, "Length", "characters")
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            self.check_pattern(pattern, value, path)

    def check_pattern(self, pattern: str, value: str, path: str) -> None:
        timeout = None
        if self.deadline is not None:
            timeout = max(self.deadline - time.monotonic(), 0.001)
        try:
            ok = regex.search(ecma_pattern(pattern), value, timeout=timeout) is not None
        except TimeoutError:
            self.late = True
            self.problems.append(
                f"{_where(path)}: {_show(value)} could not be checked against the pattern "
                f"{pattern!r} in time (the pattern backtracks too much on this value); "
                "send a shorter or simpler value"
            )
            return
        except (regex.error, ValueError, OverflowError):
            ok = True  # a broken pattern in a foreign spec is the spec's fault, not the call's
        if not ok:
            self.problems.append(
                f"{_where(path)}: {_show(value)} does not match the pattern {pattern!r}"
            )

    def check_number(self, schema: dict[str, Any], value: float, path: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            self.problems.append(
                f"{_where(path)}: {_show(value)} is not a JSON number; send a finite number"
            )
            return
        bounds = dict(_BOUNDS)
        for flag, bound in _DRAFT4_FLAGS.items():
            if schema.get(flag) is True:  # Draft 4: the flag makes its bound strict
                bounds[bound] = _BOUNDS[flag]
        for key, (holds, op) in bounds.items():
            lim = schema.get(key)
            if is_number(lim) and not holds(value, lim):
                self.problems.append(f"{_where(path)}: must be {op} {lim}, got {_show(value)}")
        step = schema.get("multipleOf")
        if is_number(step) and step > 0 and not _multiple_of(value, step):
            self.problems.append(
                f"{_where(path)}: must be a multiple of {step}, got {_show(value)}"
            )


def _multiple_of(value: float, step: float) -> bool:
    """Exact, on the decimal numbers the JSON text wrote (a float's shortest repr): ``0.3``
    is a multiple of ``0.1``, though ``0.3 % 0.1`` in floats says it is not."""

    def exact(x: float) -> Fraction:
        return Fraction(x) if isinstance(x, int) else Fraction(repr(x))

    return exact(value) % exact(step) == 0


def _list(value: Any) -> list[Any]:
    """A keyword's list value; anything else (a malformed spec) counts as absent."""
    return value if isinstance(value, list) else []


def _bound(value: Any) -> float | None:
    """A length bound, or None when absent or not a number (a malformed spec)."""
    return value if is_number(value) else None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(t: Any) -> str:
    return " or ".join(t) if isinstance(t, list) else str(t)


def validate(
    schema: dict[str, Any], value: Any, *, budget_s: float | None = DEFAULT_BUDGET_S
) -> tuple[Any, list[str]]:
    """``(normalised value, problems)``; no problems means the value is valid.

    JSON schema draft 2020-12: ``type enum const properties required
    additionalProperties minProperties maxProperties items prefixItems minItems
    maxItems uniqueItems anyOf oneOf allOf not $ref`` (to ``#`` or ``#/$defs/...``)
    ``minimum maximum exclusiveMinimum exclusiveMaximum multipleOf minLength
    maxLength pattern`` and boolean schemas; annotations (``format``, ``default``,
    ``title``...) are not checked and defaults not filled in. Older forms are checked as
    their authors meant: ``nullable``, boolean ``exclusiveMinimum``/``exclusiveMaximum``,
    ``items`` as a list with ``additionalItems``, ``definitions``.

    ``budget_s``: seconds the check may take (``None``: no time bound; depth and
    the linear checks still bound it). See the module docstring.
    """
    top = _too_deep(value, MAX_DEPTH)
    if top is not None:
        where = f"argument {top!r} is" if top else "the arguments are"
        return value, [f"{where} nested more than {MAX_DEPTH} levels deep; send a flatter value"]
    deadline = None if budget_s is None else time.monotonic() + budget_s
    checker = _Checker(deadline, schema)
    fixed = checker.check(schema, value, "")
    return fixed, checker.problems
