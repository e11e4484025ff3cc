# SPDX-License-Identifier: Apache-2.0
"""The engine package's one cattrs converter.

Every (de)serialization of engine values goes through ``converter`` so that
renames and hooks live in one place. Structuring errors are re-raised as
``ConfigError`` with ``cattrs.transform_error`` text, never as raw exception
groups.
"""

from __future__ import annotations

from typing import Any

import cattrs

from mp13_engine._errors import ConfigError


def _make_converter() -> cattrs.Converter:
    from mp13_engine._config import DeviceMap, MaxMemory

    conv = cattrs.Converter(forbid_extra_keys=True)
    # Unions of str, int and dict: passed through as is; EngineConfig's validators check them.
    for union in (DeviceMap, MaxMemory):
        conv.register_structure_hook(union, lambda value, _: value)
    return conv


class _Converter:
    """Thin wrapper mapping cattrs errors to ``ConfigError``."""

    def __init__(self) -> None:
        self._conv = _make_converter()

    def structure(self, data: Any, cls: type) -> Any:
        try:
            return self._conv.structure(data, cls)
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

    def unstructure(self, value: Any) -> Any:
        return self._conv.unstructure(value)


def _find_config_error(exc: BaseException) -> ConfigError | None:
    if isinstance(exc, ConfigError):
        return exc
    for sub in getattr(exc, "exceptions", ()):
        found = _find_config_error(sub)
        if found is not None:
            return found
    return None


converter = _Converter()
