# SPDX-License-Identifier: MIT
"""Fixtures for the context layer: an in-memory session, a scripted engine, a context."""

from __future__ import annotations

import pytest

from mp13_context import ChatContext, Session
from mp13_context.testing import FakeEngine


@pytest.fixture
def session():
    s = Session.open(":memory:")
    yield s
    s.close()


@pytest.fixture
def engine():
    return FakeEngine()


@pytest.fixture
def ctx(session, engine):
    return ChatContext(session, engine=engine)
