# SPDX-License-Identifier: MIT
"""The package's one cattrs converter.

Used to (un)structure toolbox snapshots, to turn tool return values into JSON, and
to build a tool's typed arguments (enums, attrs classes, dataclasses, tuples)
from the validated JSON the model sent. Enums travel as their values.

A recursive alias (``JSON = dict[str, "JSON"] | list["JSON"] | str | ...``) holds its
own name as a forward reference, which only its module can resolve: ``bind_refs``
gives each such reference its module, and the hook below resolves it (an attribute
of that module, bound in turn) when a value reaches it.

cattrs cannot structure unions of plain types (``int | str``) on its own; the
hook below picks the first member whose JSON shape fits the value. The value
was already validated against the tool's schema, so "fits" only has to choose,
not to check. A value that no member takes (saved data, which nothing validated
first) is an error, never passed on as it came.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import typing
from collections.abc import Callable
from typing import Any

import attrs
import cattrs
from cattrs.v import format_exception

from mp13_toolbox._json_values import IS_TYPE, TYPE_NAMES, json_equal

converter = cattrs.Converter(forbid_extra_keys=False)

# Scalar annotation -> whether a JSON value fits it: ``_validate``'s check of its JSON type.
_SCALAR_FITS: dict[Any, Callable[[Any], bool]] = {
    py: IS_TYPE[name] for py, name in TYPE_NAMES.items() if py not in (dict, list)
}
_SEQUENCE_ORIGINS = (list, tuple, set, frozenset)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _fits(value: Any, tp: Any) -> bool:
    if tp is Any:
        return True
    if _is_bound_ref(tp):
        return _fits(value, resolve_forward(tp))
    if tp in _SCALAR_FITS:
        return _SCALAR_FITS[tp](value)
    origin = typing.get_origin(tp)
    # JSON equality, not Python's: ``true`` is not the member ``1`` (nor ``1`` ``True``).
    if origin is typing.Literal:
        return any(json_equal(value, _plain(a)) for a in typing.get_args(tp))
    if origin is typing.Annotated:
        return _fits(value, typing.get_args(tp)[0])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return any(json_equal(value, m.value) for m in tp)
    kind = origin or tp
    if isinstance(kind, type) and issubclass(kind, _SEQUENCE_ORIGINS):
        return isinstance(value, (list, tuple))
    if isinstance(value, dict):
        return True  # dict, Mapping, attrs class, dataclass, TypedDict: let cattrs decide
    return not (attrs.has(tp) or (isinstance(tp, type) and dataclasses.is_dataclass(tp)))


def bind_refs(tp: Any, module: str) -> Any:
    """``tp`` with each forward reference in it (``"JSON"`` or ``ForwardRef("JSON")``
    inside a union or a container) tied to ``module``, where ``resolve_forward`` looks it
    up. A type without one is returned as it is (the same object); record classes are
    not entered (their own annotations resolve in their own module)."""
    if isinstance(tp, str):
        tp = typing.ForwardRef(tp)
    if isinstance(tp, typing.ForwardRef):
        return tp if tp.__forward_module__ else typing.ForwardRef(tp.__forward_arg__, module=module)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if not args or origin is typing.Literal:
        return tp
    if origin is typing.Annotated:
        inner = bind_refs(args[0], module)
        key = (inner, *tp.__metadata__)
        return tp if inner is args[0] else typing.Annotated[key]
    bound = tuple(bind_refs(a, module) for a in args)
    if all(b is a for b, a in zip(bound, args, strict=True)):
        return tp
    if _is_union(tp):
        return typing.Union[bound]  # noqa: UP007 - members are runtime values, some ForwardRefs
    return types.GenericAlias(origin, bound)


def resolve_forward(ref: typing.ForwardRef) -> Any:
    """What a forward reference from ``bind_refs`` names: the module attribute, with its
    own references bound. ``NameError`` when it names nothing there."""
    module = sys.modules.get(ref.__forward_module__ or "")
    name = ref.__forward_arg__
    if module is None or not name.isidentifier() or not hasattr(module, name):
        raise NameError(
            f"{name!r} is not a name defined in module {ref.__forward_module__!r}; "
            "define the type it refers to at module level"
        )
    return bind_refs(getattr(module, name), module.__name__)


def _is_bound_ref(tp: Any) -> bool:
    return isinstance(tp, typing.ForwardRef) and tp.__forward_module__ is not None


converter.register_structure_hook_func(
    _is_bound_ref, lambda value, tp: converter.structure(value, resolve_forward(tp))
)


def _structure_union(value: Any, tp: Any) -> Any:
    failed: Exception | None = None
    for member in typing.get_args(tp):
        if value is None and member is type(None):
            return None  # cattrs has no hook for NoneType itself
        if _fits(value, member):
            try:
                return converter.structure(value, member)
            except Exception as exc:  # try the next member
                failed = exc
    if failed is not None:
        raise failed  # a member had the value's shape but refused it: its reason is the best
    raise ValueError(f"{value!r} is none of {tp}")


converter.register_structure_hook_func(_is_union, _structure_union)


def _plain(value: Any) -> Any:
    """An enum member as the value the model sends for it (``Literal[Color.RED]``)."""
    return value.value if isinstance(value, enum.Enum) else value


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.Literal


def _structure_literal(value: Any, tp: Any) -> Any:
    """The ``Literal``'s own value that ``value`` equals in JSON: ``1.0`` arrives as the
    declared ``1``, and ``true`` never passes for ``1`` (cattrs' check uses Python's ``==``)."""
    for allowed in typing.get_args(tp):
        if json_equal(value, _plain(allowed)):
            return allowed
    raise ValueError(f"{value!r} is not one of {typing.get_args(tp)}")


converter.register_structure_hook_func(_is_literal, _structure_literal)


def _key_wrappers(name: str) -> tuple[Any, ...]:
    """``typing``'s ``Required``/``NotRequired`` (3.11+) and ``typing_extensions``' when
    the program imported it (the 3.10 spelling); nothing is imported here."""
    modules = (typing, sys.modules.get("typing_extensions"))
    return tuple(w for m in modules if m is not None for w in [getattr(m, name, None)] if w)


_REQUIRED = _key_wrappers("Required")
_NOT_REQUIRED = _key_wrappers("NotRequired")


def typeddict_keys(tp: Any) -> list[tuple[str, Any, bool]]:
    """``(name, type, required)`` per key of TypedDict ``tp``, types unwrapped.

    A ``Required``/``NotRequired`` wrapper decides, else ``__required_keys__`` (the
    class's ``total``): under ``from __future__ import annotations`` Python 3.11 cannot
    see the wrappers when it builds ``__required_keys__`` (nor can cattrs, which reads
    it), so it would require a ``NotRequired`` key.
    """
    hints = typing.get_type_hints(tp, include_extras=True)
    by_class = getattr(tp, "__required_keys__", frozenset(hints))
    out = []
    for name, key_type in hints.items():
        required = name in by_class
        while typing.get_origin(key_type) in (*_REQUIRED, *_NOT_REQUIRED):
            required = typing.get_origin(key_type) in _REQUIRED
            key_type = typing.get_args(key_type)[0]
        out.append((name, key_type, required))
    return out


def _structure_typeddict(value: Any, tp: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected an object for {tp.__name__}, got {value!r}")
    keys = typeddict_keys(tp)
    missing = [name for name, _, required in keys if required and name not in value]
    if missing:
        raise ValueError(f"required keys missing: {', '.join(missing)}")
    return {n: converter.structure(value[n], t) for n, t, _ in keys if n in value}


converter.register_structure_hook_func(typing.is_typeddict, _structure_typeddict)


def _describe(exc: BaseException, tp: Any) -> str:
    """cattrs' words for ``exc``, plus its own message: a class's validator says what is wrong."""
    text = format_exception(exc, tp)
    detail = str(exc)
    return f"{text} ({detail})" if detail and detail not in text else text


def error_text(exc: BaseException, path: str = "$") -> str:
    """``cattrs.transform_error`` text for users instead of a raw exception group (any
    other exception gets one line too); ``path`` names what was structured (``$``: the
    whole value)."""
    return "; ".join(cattrs.transform_error(exc, path, format_exception=_describe))
