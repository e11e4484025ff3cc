# SPDX-License-Identifier: MIT
"""Test helpers for code built on ``mp13_context``: a scripted fake engine."""

from mp13_context.testing._fake import FakeEngine, FakeReply, echo, fake_logprobs

__all__ = ["FakeEngine", "FakeReply", "echo", "fake_logprobs"]
