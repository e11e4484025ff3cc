# SPDX-License-Identifier: MIT
"""The one cattrs converter of ``mp13chat`` (config file in and out).

Unknown keys are rejected (a typo in the config file must not be silently ignored);
errors are turned into readable text with ``cattrs.transform_error`` by the caller.
Booleans are checked once, by ``ChatConfig`` itself, for a file and a wrapper app alike.
"""

from __future__ import annotations

import cattrs


def make_converter() -> cattrs.Converter:
    """A fresh converter; one per use site keeps this package free of module state."""
    converter = cattrs.Converter(forbid_extra_keys=True)
    # cattrs' default is bool(value) ("false" would become True); handed over as it is,
    # ChatConfig's own check refuses it with the field's name and the value.
    converter.register_structure_hook(bool, lambda value, _type: value)
    return converter
