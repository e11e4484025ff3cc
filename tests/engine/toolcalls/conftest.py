# SPDX-License-Identifier: Apache-2.0
"""The toolcalls suite runs every built-in format and one format a user registers.

``examples/custom_tool_format.py``'s ``command_r`` format is registered around every test
of this folder (scoped, so nothing leaks), which puts a user-added format through the
same conformance, streaming and fuzz tests as the built-ins. After each test the registry
must be exactly as before: a test that registers a format has to undo it.
"""

from __future__ import annotations

import pytest

from mp13_engine import toolcalls
from tests.engine.toolcalls._toolcalls_cases import USER_FORMAT


@pytest.fixture(autouse=True)
def _user_format_registered():
    before = toolcalls.formats()
    with toolcalls.register_format(USER_FORMAT):
        yield
    assert toolcalls.formats() == before, "a test left a tool-call format registered"
