# SPDX-License-Identifier: MIT
"""Check tool arguments against a JSON schema, with messages a model can act on.

``validate(schema, value)`` returns ``(value, problems)``. Each problem names the
argument (``items[2].name``), what was expected and what was received, e.g.
``argument 'n': expected integer, got string "5"``. The supported keywords are
the ones ``_schema`` emits plus the common ones found in hand-written specs:
``type`` (a name or a list), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties`` (bool or schema), ``items``, ``prefixItems``,
``minItems``/``maxItems``, ``uniqueItems``, ``anyOf``/``oneOf``/``allOf``,
``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``,
``minLength``/``maxLength`` and ``pattern``. Unknown keywords are ignored
(JSON-schema semantics), so foreign specs never make a tool uncallable.

The only conversion is the lossless one JSON itself blurs: an integral float
(``3.0``) where an ``integer`` is expected becomes ``3``. Nothing else is
coerced: a wrong type is reported so the model can correct its call.
"""

from __future__ import annotations

import json
import re
from typing import Any

_MAX_PROBLEMS = 8
_TYPE_NAMES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def _json_type(value: Any) -> str:
    for py, name in _TYPE_NAMES.items():
        if type(value) is py:
            return name
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _show(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _where(path: str) -> str:
    return f"argument {path!r}" if path else "the arguments"


def _match_type(value: Any, t: str) -> tuple[bool, Any]:
    """Whether ``value`` is JSON type ``t``; the (possibly normalised) value."""
    if t == "integer":
        if isinstance(value, bool):
            return False, value
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        return False, value
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool), value
    if t == "string":
        return isinstance(value, str), value
    if t == "boolean":
        return isinstance(value, bool), value
    if t == "null":
        return value is None, value
    if t == "array":
        return isinstance(value, (list, tuple)), value
    if t == "object":
        return isinstance(value, dict), value
    return True, value  # unknown type names are not enforced


def _check(schema: Any, value: Any, path: str, out: list[str]) -> Any:
    if not isinstance(schema, dict) or len(out) >= _MAX_PROBLEMS:
        return value
    if "anyOf" in schema or "oneOf" in schema:
        options = schema.get("anyOf") or schema.get("oneOf") or []
        firsts: list[str] = []
        for option in options:
            trial: list[str] = []
            fixed = _check(option, value, path, trial)
            if not trial:
                value = fixed
                break
            firsts.append(trial[0])
        else:
            if options:
                out.append(
                    f"{_where(path)}: {_show(value)} matches none of the allowed forms "
                    f"({'; '.join(firsts[:3])})"
                )
                return value
    for sub in schema.get("allOf", ()):
        value = _check(sub, value, path, out)
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
            out.append(
                f"{_where(path)}: expected {expected}, got {_json_type(value)} {_show(value)}"
            )
            return value
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_show(v, 30) for v in schema["enum"])
        out.append(f"{_where(path)}: {_show(value)} is not one of: {allowed}")
        return value
    if "const" in schema and value != schema["const"]:
        out.append(f"{_where(path)}: must be {_show(schema['const'])}, got {_show(value)}")
        return value
    if isinstance(value, dict):
        return _check_object(schema, value, path, out)
    if isinstance(value, (list, tuple)):
        return _check_array(schema, list(value), path, out)
    if isinstance(value, str):
        _check_string(schema, value, path, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(schema, value, path, out)
    return value


def _check_object(schema: dict[str, Any], value: dict, path: str, out: list[str]) -> dict:
    props = schema.get("properties") or {}
    result = dict(value)
    missing = [k for k in schema.get("required", ()) if k not in value]
    for key in missing:
        sub = props.get(key) or {}
        kind = sub.get("type", "value")
        out.append(f"{_where(_join(path, key))} is required ({_kind(kind)}) but was not given")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        sub_path = _join(path, key)
        if key in props:
            result[key] = _check(props[key], item, sub_path, out)
        elif extra is False:
            known = ", ".join(props) or "none"
            out.append(f"{_where(sub_path)} is not accepted; accepted arguments: {known}")
        elif isinstance(extra, dict):
            result[key] = _check(extra, item, sub_path, out)
    return result


def _check_array(schema: dict[str, Any], value: list, path: str, out: list[str]) -> list:
    n = len(value)
    if "minItems" in schema and n < schema["minItems"]:
        out.append(f"{_where(path)}: needs at least {schema['minItems']} items, got {n}")
    if "maxItems" in schema and n > schema["maxItems"]:
        out.append(f"{_where(path)}: takes at most {schema['maxItems']} items, got {n}")
    prefix = schema.get("prefixItems") or []
    items = schema.get("items")
    result = list(value)
    for i, item in enumerate(value):
        sub = prefix[i] if i < len(prefix) else items
        if isinstance(sub, dict):
            result[i] = _check(sub, item, f"{path}[{i}]", out)
    if schema.get("uniqueItems"):
        seen: list[str] = []
        for item in result:
            key = _show(item, 10_000)
            if key in seen:
                out.append(f"{_where(path)}: items must be unique, {_show(item)} appears twice")
                break
            seen.append(key)
    return result


def _check_string(schema: dict[str, Any], value: str, path: str, out: list[str]) -> None:
    n = len(value)
    if "minLength" in schema and n < schema["minLength"]:
        out.append(f"{_where(path)}: needs at least {schema['minLength']} characters, got {n}")
    if "maxLength" in schema and n > schema["maxLength"]:
        out.append(f"{_where(path)}: takes at most {schema['maxLength']} characters, got {n}")
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            ok = re.search(pattern, value) is not None
        except re.error:
            ok = True  # a broken pattern in a foreign spec is the spec's fault, not the call's
        if not ok:
            out.append(f"{_where(path)}: {_show(value)} does not match the pattern {pattern!r}")


def _check_number(schema: dict[str, Any], value: float, path: str, out: list[str]) -> None:
    checks = (
        ("minimum", lambda lim: value >= lim, ">="),
        ("maximum", lambda lim: value <= lim, "<="),
        ("exclusiveMinimum", lambda lim: value > lim, ">"),
        ("exclusiveMaximum", lambda lim: value < lim, "<"),
    )
    for key, ok, op in checks:
        lim = schema.get(key)
        if isinstance(lim, (int, float)) and not isinstance(lim, bool) and not ok(lim):
            out.append(f"{_where(path)}: must be {op} {lim}, got {_show(value)}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(t: Any) -> str:
    return " or ".join(t) if isinstance(t, list) else str(t)


def validate(schema: dict[str, Any], value: Any) -> tuple[Any, list[str]]:
    """``(normalised value, problems)``; no problems means the value is valid."""
    problems: list[str] = []
    fixed = _check(schema, value, "", problems)
    return fixed, problems
