# SPDX-License-Identifier: MIT
"""The one cattrs converter of ``mp13chat`` (config file in and out).

Unknown keys are rejected (a typo in the config file must not be silently ignored);
errors are turned into readable text with ``cattrs.transform_error`` by the caller.
"""

from __future__ import annotations

import cattrs


def make_converter() -> cattrs.Converter:
    """A fresh converter; one per use site keeps this package free of module state."""
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(bool, _strict_bool)
    return converter


def _strict_bool(value: object, _type: type) -> bool:
    # cattrs' default is bool(value): "false" would become True.
    if isinstance(value, bool):
        return value
    raise TypeError(f"expected true or false, got {value!r}")
