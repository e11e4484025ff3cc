# SPDX-License-Identifier: MIT
"""JSON schema for a Python function: from its signature and Google-style docstring.

``function_spec(func)`` returns a ``ToolSpec`` whose ``parameters`` is an
``object`` schema with one property per parameter. Supported annotations:
``str int float bool None Any``, ``Optional[X]`` / ``X | None``, unions,
``Literal[...]``, ``Enum`` subclasses (by value), ``list/set/frozenset/Sequence
[X]``, ``tuple[X, ...]`` and fixed tuples, ``dict[str, X]`` / ``Mapping``,
``Annotated[X, "description"]``, and nested attrs classes, dataclasses and
``TypedDict``. A record type that contains itself (``children: list[Node]``, also
through another record), or a module-level alias that does (``JSON = dict[str,
"JSON"] | list["JSON"] | str | ...``), is written once under the schema's ``$defs``
and named by ``{"$ref": "#/$defs/Node"}`` wherever it is used; every other type is
inlined, as it always was. A parameter without a default is ``required``; a JSON-able
default that fits the schema is recorded as ``default`` (``inf`` and ``nan``
are not JSON, ``x: int = 1.5`` does not fit: not recorded), and a parameter
whose default is ``None`` accepts ``null`` (``x: int = None`` takes it).
``Literal`` members that are enum members are sent as their values. ``*args``
is rejected, ``**kwargs`` allows extra arguments, and a parameter annotated
``ToolContext`` (also ``Optional``/``Annotated``) is injected by the toolbox and
not part of the schema. TypedDict keys follow their ``Required``/``NotRequired``
wrappers.

Besides functions and methods, an object with ``__call__`` (read from its
class's ``__call__``) and a ``functools.partial`` (read from the function it
wraps, less what it binds; name it with ``name=``) are tools. A generator
function is refused: the model would get the generator object, not its items.

Descriptions come from the docstring: the text before the first section is the
tool's description; ``Args:`` (also ``Arguments:``/``Parameters:``) lines
``name (type): text`` with indented continuation lines describe parameters.
reST field lists (``:param name: text``) and NumPy ``Parameters`` sections are
read too (``parse_docstring``), so their markup never reaches the description.
An ``Annotated`` string wins over the docstring.

The schema only uses the subset that ``_validate`` checks, so what is
advertised is exactly what is enforced. Unsupported annotations raise
``ToolRegistrationError`` naming the parameter and what to do.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import inspect
import json
import re
import types
import typing
from typing import Any

import attrs

from mp13_toolbox._context import ToolContext
from mp13_toolbox._convert import bind_refs, resolve_forward, typeddict_keys
from mp13_toolbox._errors import ToolRegistrationError
from mp13_toolbox._json_values import TYPE_NAMES
from mp13_toolbox._registry import Signature
from mp13_toolbox._types import ToolSpec
from mp13_toolbox._validate import validate

_SECTION = re.compile(r"^\s*([A-Z][A-Za-z ]*):\s*$")
_ARG_SECTIONS = {
    "Args",
    "Arguments",
    "Parameters",
    "Other Parameters",
    "Params",
    "Keyword Args",
    "Keyword Arguments",
}
_ARG_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_MAX_DEPTH = 8
# reST field lists (``:param int a: text``) and NumPy sections (``Parameters`` over a
# line of dashes; ``a : int`` entries).
_FIELD = re.compile(r"^:(\w+)([^:]*):(.*)$")
_FIELDS = ":fields"  # the section name used for a field list
_PARAM_FIELDS = {"param", "parameter", "arg", "argument", "key", "keyword"}
_RULE = re.compile(r"^\s*-{3,}\s*$")
_NUMPY_HEAD = re.compile(
    r"^(Parameters|Other Parameters|Keyword Arguments|Returns|Yields|Receives|Raises|Warns"
    r"|Warnings|See Also|Notes|References|Examples|Attributes|Methods)$"
)
_NUMPY_ARG = re.compile(r"^\*{0,2}(\w+)\s*(?::.*)?$")

# Scalar annotation -> its schema, by the JSON type names ``_validate`` checks.
_SCALARS: dict[Any, dict[str, Any]] = {
    py: {"type": name} for py, name in TYPE_NAMES.items() if py not in (dict, list)
}
_ARRAY_ORIGINS = {
    list,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Set,
    collections.abc.MutableSet,
    collections.abc.Iterable,
    collections.abc.Collection,
}
_DICT_ORIGINS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}
# The class of ``attrs.Factory(...)`` defaults (attrs' stubs declare ``Factory`` a function).
_ATTRS_FACTORY: type = type(attrs.Factory(list))


@attrs.frozen
class Docstring:
    """A parsed Google-style docstring: description and per-argument text."""

    description: str = ""
    args: dict[str, str] = attrs.field(factory=dict, hash=False)


def parse_docstring(doc: str | None) -> Docstring:
    """Split a docstring into its summary text and per-argument text.

    Google style (``Args:`` entries) is the house style; reST field lists
    (``:param [type] name: text``; ``:returns:``, ``:type x:``... are dropped) and
    NumPy sections (a ``Parameters`` header underlined with dashes, ``name : type``
    lines with indented text) are read too, so that their markup never lands in the
    description the model reads.
    """
    if not doc:
        return Docstring()
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent = 0
    numpy = False
    for i, line in enumerate(lines):
        top = bool(line.strip()) and not line.startswith((" ", "\t"))
        head = _SECTION.match(line)
        if head and top:
            section, current, numpy = head.group(1).strip(), None, False
            continue
        if numpy and _RULE.match(line) and i and _NUMPY_HEAD.match(lines[i - 1]):
            continue  # the underline of the header just read
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if top and _NUMPY_HEAD.match(line) and _RULE.match(following):
            section, current, numpy = line.strip(), None, True
            continue
        field = _FIELD.match(line)
        if field:
            kind, middle, text = field.groups()
            names = middle.split()
            section, current = _FIELDS, None
            if kind in _PARAM_FIELDS and names:
                current = names[-1].lstrip("*")
                args[current] = text.strip()
            continue
        if section is None:
            desc.append(line)
            continue
        if section not in (*_ARG_SECTIONS, _FIELDS) or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if section == _FIELDS or (numpy and indent > 0):
            if current is not None and indent > 0:  # continuation of the current entry
                args[current] = f"{args[current]} {line.strip()}".strip()
            elif section == _FIELDS:
                current = None  # prose after a field list is not an argument's
            continue
        m = _NUMPY_ARG.match(line) if numpy else _ARG_LINE.match(line)
        if numpy:
            current = m.group(1) if m else None  # `name : type`: the type is not text
            if current is not None:
                args[current] = ""
        elif m and (current is None or indent <= arg_indent):
            current, arg_indent = m.group(1), indent
            args[current] = m.group(3).strip()
        elif current is not None:
            args[current] = f"{args[current]} {line.strip()}".strip()
    text = "\n".join(desc).strip()
    return Docstring(description=re.sub(r"\n{3,}", "\n\n", text), args=args)


def _jsonable(value: Any) -> bool:
    """Whether ``value`` is JSON: ``inf`` and ``nan`` are not (``json`` would write
    ``Infinity``, which a model's template and other JSON readers reject)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _with_default(
    schema: dict[str, Any], default: Any, *, takes_none: bool, defs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``schema`` of a parameter (or field) with a default, saying what the function takes.

    ``takes_none``: a parameter's ``None`` default (``x: int = None``) is a value the
    function takes (it gets a ``null`` as sent), so the schema accepts ``null``;
    advertising ``"default": null`` on a schema that refuses ``null`` would have the
    model's copy of the default refused. A field of a class is built by its type, which
    may refuse ``None``, so there it is not. The default is recorded only when it is
    JSON (``inf``, ``nan`` and objects are not) and fits the schema (``x: int = 1.5``
    would advertise a value the tool refuses). ``defs``: the ``$defs`` built so far, which
    a ``$ref`` in ``schema`` names (a recursive type's).
    """
    if takes_none and default is None and _problems(schema, None, defs):
        schema = _nullable(schema)
    if _jsonable(default) and not _problems(schema, default, defs):
        schema["default"] = default
    return schema


def _problems(schema: dict[str, Any], value: Any, defs: dict[str, Any] | None) -> list[str]:
    """``validate``'s problems for ``value`` against ``schema``, its ``$ref``s resolved in
    ``defs`` (a ref resolves against the root it is checked from)."""
    root = dict(schema, **{"$defs": defs}) if defs else schema
    return validate(root, value, budget_s=None)[1]


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kinds = {type(v) for v in values}
    kind = kinds.pop() if len(kinds) == 1 else None
    out = dict(_SCALARS[kind]) if kind in _SCALARS and kind is not type(None) else {}
    out["enum"] = values
    return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    t = schema.get("type")
    if isinstance(t, str) and set(schema) <= {"type", "description", "items", "enum"}:
        out = dict(schema, type=[t, "null"])
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    return {"anyOf": [schema, {"type": "null"}]}


class _RefState:
    """The recursive-capable types one tool's schema is being built from (record classes,
    and forward references, which is how a recursive alias names itself), and the
    ``$defs`` of those that refer to themselves.

    Invariant: a type is in ``active`` exactly while its own schema is being built;
    meeting it again then means the type is recursive, and it gets a name in ``names``. A
    recursive type's schema is written once, under ``defs[name]``, and every use of it
    (the outermost included) is ``{"$ref": "#/$defs/<name>"}``. Types that do not recur
    are inlined as before, so their schemas stay exactly what models were shown.
    """

    def __init__(self) -> None:
        self.active: list[Any] = []
        self.names: dict[Any, str] = {}
        self.defs: dict[str, Any] = {}

    def name(self, key: Any) -> str:
        """The ``$defs`` name of recursive ``key``: its class or alias name, numbered when
        two different types share one."""
        if key not in self.names:
            base = key.__forward_arg__ if isinstance(key, typing.ForwardRef) else key.__name__
            taken = set(self.names.values())
            name, n = base, 1
            while name in taken:
                n += 1
                name = f"{base}{n}"
            self.names[key] = name
        return self.names[key]

    def ref(self, key: Any) -> dict[str, Any]:
        return {"$ref": f"#/$defs/{self.name(key)}"}

    def build(self, key: Any, make: collections.abc.Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The schema ``make`` builds for ``key``: a ``$ref`` if ``key`` turned out to
        be recursive (its schema then under ``$defs``), else the schema itself."""
        if key in self.active or self.names.get(key) in self.defs:
            return self.ref(key)  # being built (so recursive), or built under $defs
        self.active.append(key)
        try:
            built = make()
        finally:
            self.active.pop()
        if key not in self.names:
            return built
        self.defs[self.name(key)] = built
        return self.ref(key)

    def reuse(self, schema: dict[str, Any]) -> dict[str, Any]:
        """A ``$ref`` for a schema equal to a def: a recursive alias used at the top
        (``x: JSON``) arrives resolved, and its definition is what it equals. Only a
        recursive type's def contains a ``$ref``, so nothing else ever equals one."""
        for name, known in self.defs.items():
            if schema == known:
                return {"$ref": f"#/$defs/{name}"}
        return schema


def type_schema(
    tp: Any, where: str, depth: int = 0, refs: _RefState | None = None
) -> dict[str, Any]:
    """JSON schema of annotation ``tp``; ``where`` names it in error messages. ``refs``
    collects the ``$defs`` of recursive types (the caller puts them at the schema's root)."""
    refs = _RefState() if refs is None else refs
    if depth > _MAX_DEPTH:
        raise ToolRegistrationError(
            f"{where}: type nesting is deeper than {_MAX_DEPTH} levels; "
            "flatten it or register the tool with register_external and a hand-written schema"
        )
    if tp is inspect.Parameter.empty or tp is Any or tp is object:
        return {}
    if tp is ToolContext:
        raise ToolRegistrationError(
            f"{where}: ToolContext is filled by the toolbox, not sent by the model; annotate "
            "a parameter of its own with ToolContext (or ToolContext | None) to receive it"
        )
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    origin = typing.get_origin(tp)
    targs = typing.get_args(tp)
    if origin is typing.Annotated:
        inner = type_schema(targs[0], where, depth + 1, refs)
        notes = [a for a in targs[1:] if isinstance(a, str)]
        if notes:
            # beside a $ref, a description is an annotation of its own (2020-12)
            inner["description"] = " ".join(notes)
        return inner
    if origin is typing.Literal:
        return _enum_schema([_plain(a) for a in targs])  # Literal[Color.RED]: its value
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in targs if a is not type(None)]
        if len(members) == 1:
            inner = type_schema(members[0], where, depth + 1, refs)
        else:
            inner = {"anyOf": [type_schema(a, where, depth + 1, refs) for a in members]}
        return refs.reuse(_nullable(inner) if len(members) < len(targs) else inner)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_schema([m.value for m in tp])
    if tp in (list, set, frozenset, tuple):
        return {"type": "array"}
    if tp is dict:
        return {"type": "object"}
    if origin in _ARRAY_ORIGINS:
        out: dict[str, Any] = {"type": "array"}
        if targs:
            out["items"] = type_schema(targs[0], f"{where}[]", depth + 1, refs)
        if origin in (set, frozenset, collections.abc.Set, collections.abc.MutableSet):
            out["uniqueItems"] = True
        return out
    if origin is tuple:
        if len(targs) == 2 and targs[1] is Ellipsis:
            item = type_schema(targs[0], f"{where}[]", depth + 1, refs)
            return {"type": "array", "items": item}
        items = [type_schema(a, f"{where}[{i}]", depth + 1, refs) for i, a in enumerate(targs)]
        return {
            "type": "array",
            "prefixItems": items,
            "minItems": len(items),
            "maxItems": len(items),
        }
    if origin in _DICT_ORIGINS:
        if targs and targs[0] is not str:
            raise ToolRegistrationError(
                f"{where}: dict keys must be str in JSON, got {targs[0]!r}; use dict[str, ...]"
            )
        out = {"type": "object"}
        if len(targs) == 2 and targs[1] is not Any:
            out["additionalProperties"] = type_schema(targs[1], f"{where}{{}}", depth + 1, refs)
        return out
    if isinstance(tp, typing.ForwardRef):  # a recursive alias naming itself
        if tp.__forward_module__ is None:  # met inside a class: cattrs would get it unbound
            raise ToolRegistrationError(
                f"{where}: the recursive alias {tp.__forward_arg__!r} is supported as a "
                "parameter's type (or inside one), not in a class's field; annotate the field "
                "with a class that contains itself instead, or make it a parameter"
            )
        try:
            target = resolve_forward(tp)
        except NameError as exc:
            raise ToolRegistrationError(f"{where}: {exc}") from exc
        return refs.build(tp, lambda: type_schema(target, where, depth + 1, refs))
    if isinstance(tp, type):
        fields = _record_fields(tp, where)
        if fields is not None:
            return refs.build(tp, lambda: _object_schema(fields, where, depth, refs))
    raise ToolRegistrationError(
        f"{where}: cannot describe type {tp!r} in JSON schema; annotate it with str, int, float, "
        "bool, list/dict/tuple of those, Literal, an Enum, an attrs class, a dataclass or a "
        "TypedDict, or register the tool with register_external and a hand-written schema"
    )


def _record_fields(tp: type, where: str) -> list[tuple[str, Any, bool, Any]] | None:
    """``(name, type, required, default)`` for attrs/dataclass/TypedDict, else None."""
    try:
        hints = typing.get_type_hints(tp, include_extras=True)
    except Exception as exc:  # forward refs that cannot be resolved
        raise ToolRegistrationError(
            f"{where}: cannot resolve the annotations of {tp.__name__}: {exc}; "
            "define the types it refers to at module level"
        ) from exc
    if attrs.has(tp):
        out = []
        for f in attrs.fields(tp):
            if not f.init:
                continue
            has_default = f.default is not attrs.NOTHING
            recordable = has_default and not isinstance(f.default, _ATTRS_FACTORY)
            default = f.default if recordable else dataclasses.MISSING
            out.append((f.alias or f.name, hints.get(f.name, f.type), not has_default, default))
        return out
    if dataclasses.is_dataclass(tp):
        out = []
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            has_default = f.default is not dataclasses.MISSING
            has_factory = f.default_factory is not dataclasses.MISSING
            out.append(
                (f.name, hints.get(f.name, f.type), not (has_default or has_factory), f.default)
            )
        return out
    if typing.is_typeddict(tp):
        return [(n, t, req, dataclasses.MISSING) for n, t, req in typeddict_keys(tp)]
    return None


def _object_schema(
    fields: list[tuple[str, Any, bool, Any]], where: str, depth: int, refs: _RefState
) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, tp, req, default in fields:
        props[name] = type_schema(tp, f"{where}.{name}", depth + 1, refs)
        if req:
            required.append(name)
        elif default is not dataclasses.MISSING:
            props[name] = _with_default(
                props[name], _plain(default), takes_none=False, defs=refs.defs
            )
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    return out


def function_spec(
    func: collections.abc.Callable[..., object],
    name: str | None = None,
    description: str | None = None,
) -> tuple[ToolSpec, Signature]:
    """The ``ToolSpec`` of ``func`` and the signature data used to call it."""
    tool_name = name or getattr(func, "__name__", None)
    if not tool_name or tool_name == "<lambda>":
        raise ToolRegistrationError(
            f"cannot name the tool for {func!r}; pass name=... to register()"
        )
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise ToolRegistrationError(
            f"cannot read the signature of {tool_name!r}: {exc}; wrap it in a def with typed "
            "parameters"
        ) from exc
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise ToolRegistrationError(
            f"tool {tool_name!r} is a generator function: the model would get "
            "'<generator object ...>', not what it yields; return a list instead "
            "(e.g. return list(...))"
        )
    annotated = _annotated(func)
    try:
        hints = typing.get_type_hints(annotated, include_extras=True)
    except Exception as exc:
        raise ToolRegistrationError(
            f"cannot resolve the type hints of {tool_name!r}: {exc}; make sure every name used "
            "in its annotations is importable from its module"
        ) from exc
    doc = parse_docstring(inspect.getdoc(annotated) or inspect.getdoc(func))
    props: dict[str, Any] = {}
    required: list[str] = []
    params: dict[str, Any] = {}
    context_param = None
    var_keyword = False
    refs = _RefState()
    module = getattr(annotated, "__module__", None) or ""
    for p in sig.parameters.values():
        tp = bind_refs(hints.get(p.name, p.annotation), module)
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            raise ToolRegistrationError(
                f"tool {tool_name!r}: *{p.name} cannot be filled from JSON arguments; "
                "use a list parameter instead"
            )
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            var_keyword = True
            continue
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolRegistrationError(
                f"tool {tool_name!r}: positional-only parameter {p.name!r} cannot be passed by "
                "name; remove the '/' from its signature"
            )
        if _is_context(tp):
            context_param = p.name
            continue
        schema = type_schema(tp, f"tool {tool_name!r}, parameter {p.name!r}", refs=refs)
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
        else:
            schema = _with_default(schema, _plain(p.default), takes_none=True, defs=refs.defs)
        if "description" not in schema and doc.args.get(p.name):
            schema["description"] = doc.args[p.name]
        props[p.name] = schema
        params[p.name] = tp
    parameters: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        parameters["required"] = required
    if not var_keyword:
        parameters["additionalProperties"] = False
    if refs.defs:  # what the parameters' "$ref"s name: only recursive types have one
        parameters["$defs"] = refs.defs
    spec = ToolSpec(
        name=tool_name,
        description=description if description is not None else doc.description,
        parameters=parameters,
    )
    return spec, Signature(params=params, context_param=context_param)


def _is_context(tp: Any) -> bool:
    """``ToolContext``, also as ``Optional[ToolContext]`` (a tool that Python code calls
    directly too) or ``Annotated[ToolContext, ...]``: the toolbox fills it."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        return members == [ToolContext]
    return tp is ToolContext


def _annotated(func: collections.abc.Callable[..., object]) -> Any:
    """The function whose annotations and docstring describe calling ``func``.

    ``typing.get_type_hints`` takes only functions, methods, classes and modules: a
    ``functools.partial`` is read through to the function it wraps (the signature
    still drops what the partial binds), an object with ``__call__`` through its
    class's ``__call__`` (the signature drops ``self``).
    """
    target: Any = func
    while isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isroutine(target) or inspect.isclass(target)):
        call = inspect.getattr_static(type(target), "__call__", None)
        if inspect.isfunction(call):
            return call
    return target


def _plain(value: Any) -> Any:
    """Enum defaults are recorded by value, the form the model sends."""
    return value.value if isinstance(value, enum.Enum) else value
