# SPDX-License-Identifier: MIT
"""Where the real chat templates (test data outside the repo) are: one place for every test.

``$MP13_SHARED_TEMPLATES`` if set, else ``shared/templates`` beside the checkout (as in CI and
the workspace). Tests that need them skip when the folder is absent.
"""

from __future__ import annotations

import os
import pathlib

_ROOT = pathlib.Path(__file__).resolve().parents[1]

SHARED_TEMPLATES = pathlib.Path(
    os.environ.get("MP13_SHARED_TEMPLATES", _ROOT.parent / "shared" / "templates")
)
