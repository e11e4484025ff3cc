# SPDX-License-Identifier: Apache-2.0
"""The engine package's one cattrs converter.

Every (de)serialization of engine values goes through ``converter`` so that
renames and hooks live in one place. ``structure`` re-raises structuring errors as
``ConfigError`` with ``cattrs.transform_error`` text, never as raw exception
groups.

Scalars are never coerced: ``bool``, ``int``, ``float`` and ``str`` fields get the
value as it is in the data, and the class's attrs validators judge it. cattrs'
default would call ``bool("false")`` (``True``: a JSON config saying
``"trust_remote_code": "false"`` would turn remote code *on*), ``int(8.7)`` or
``str(123)``; a value of the wrong type is a ``ConfigError`` naming the field instead.

A union with a ``dict`` member (``str | dict[str, str | int] | None``, e.g.
``EngineConfig.device_map``) is passed through as is: cattrs cannot structure
such unions, and the class that declares the field validates it (attrs
validators). This module knows no engine class, so any module may use it.
"""

from __future__ import annotations

import types
import typing
from typing import Any, TypeVar

import cattrs

from mp13_engine._errors import ConfigError

T = TypeVar("T")


def _is_union_with_dict(tp: Any) -> bool:
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return False
    return any(typing.get_origin(m) is dict or m is dict for m in typing.get_args(tp))


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook_func(_is_union_with_dict, lambda value, _: value)
    for scalar in (bool, int, float, str):
        conv.register_structure_hook(scalar, _as_given)
    return conv


def _as_given(value: Any, _: Any) -> Any:
    """A scalar field's value unconverted: its class's validator checks the type."""
    return value


converter = _make_converter()


def structure(data: Any, cls: type[T]) -> T:
    """``cls`` from ``data`` through ``converter``; every failure is a ``ConfigError``."""
    try:
        return converter.structure(data, cls)
    except ConfigError:
        raise
    except Exception as exc:
        # attrs validators raise ConfigError inside the group: surface the first one as is
        inner = _find_config_error(exc)
        if inner is not None:
            raise inner from exc
        msgs = (
            "; ".join(cattrs.transform_error(exc))
            if isinstance(exc, cattrs.BaseValidationError)
            else str(exc)
        )
        raise ConfigError(f"invalid {cls.__name__}: {msgs}") from exc


def _find_config_error(exc: BaseException) -> ConfigError | None:
    if isinstance(exc, ConfigError):
        return exc
    for sub in getattr(exc, "exceptions", ()):
        found = _find_config_error(sub)
        if found is not None:
            return found
    return None
