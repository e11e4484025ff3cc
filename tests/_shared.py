# SPDX-License-Identifier: MIT
"""Where the real chat templates used by the tests are: one place for every test.

They ship with the tests (``tests/templates``, each file's first line names its source; the
licences are listed in ``tests/templates/README.md``), so a fresh clone runs every test.
"""

from __future__ import annotations

import pathlib

SHARED_TEMPLATES = pathlib.Path(__file__).resolve().parent / "templates"
