# SPDX-License-Identifier: MIT
"""The package's one cattrs converter.

Used to (un)structure toolbox state, to turn tool return values into JSON, and
to build a tool's typed arguments (enums, attrs classes, dataclasses, tuples)
from the validated JSON the model sent. Enums travel as their values; dicts
whose values are enums (tool modes, approval defaults) as plain strings.
"""

from __future__ import annotations

import cattrs

converter = cattrs.Converter(forbid_extra_keys=False)


def error_text(exc: BaseException) -> str:
    """``cattrs.transform_error`` text for users instead of a raw exception group."""
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    return f"{type(exc).__name__}: {exc}"
