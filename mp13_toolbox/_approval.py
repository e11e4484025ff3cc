# SPDX-License-Identifier: MIT
"""Approval: may this call run?

Each tool has a ``Risk`` (``low`` / ``medium`` / ``high``) and optionally its own
``Approval`` policy (``allow`` / ``deny`` / ``ask``). Without its own policy the
toolbox's per-risk default applies (``DEFAULT_APPROVALS``: low -> allow,
medium -> ask, high -> ask). ``ask`` calls the approver given to
``Toolbox.execute`` / ``aexecute`` (sync or async), which answers with an
``ApprovalAnswer`` (``yes`` / ``no`` / ``always`` / ``never``), a bool, or one of
those strings. ``always`` and ``never`` are remembered per tool in the
toolbox (and in its saved state) so the approver is not asked again; ``yes`` and
``no`` apply to this call only. With no approver, ``ask`` denies, and the
error result says so. Any other answer (``None`` from an approver that forgot to
return, ``"maybe"``) counts as ``no``, and the error result names it rather
than saying the user declined. An approver that raises (an async one's own
``CancelledError`` included) does not run the call either, and the error result
says what it raised; only the cancellation of the caller's task propagates.

Order of precedence: a remembered ``never``/``always`` answer, then the tool's
own policy, then the per-risk default. An explicit ``deny`` policy beats a
remembered ``always`` (the operator's rule outranks an earlier answer).
"""

from __future__ import annotations

import enum
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import Union

import attrs

from mp13_toolbox._types import ToolCall, enum_setting


class Risk(str, enum.Enum):
    """How much harm a tool can do; picks the default approval policy."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class Approval(str, enum.Enum):
    """A tool's approval policy."""

    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"


class ApprovalAnswer(str, enum.Enum):
    """What an approver answers. ``ALWAYS``/``NEVER`` are remembered per tool."""

    YES = "yes"
    NO = "no"
    ALWAYS = "always"
    NEVER = "never"

    @classmethod
    def parse(cls, value: object) -> ApprovalAnswer:
        """An approver's reply as an answer: a member, a bool, or a typed word: ``y``,
        ``yes``, ``allow``; ``n``, ``no``, ``deny``; ``a``, ``always``; ``v``, ``never``
        (the letters of a ``[y]es / [n]o / [a]lways / ne[v]er`` question), in any case.
        Anything else counts as ``NO``: only a clear yes runs a tool."""
        if isinstance(value, ApprovalAnswer):
            return value
        if isinstance(value, bool):
            return cls.YES if value else cls.NO
        if isinstance(value, str):
            return _ANSWER_WORDS.get(value.strip().lower(), cls.NO)
        return cls.NO


#: The per-risk defaults, read-only: a toolbox takes a copy and changes its own
#: (``Toolbox(approval_defaults=...)``, ``set_approval_default``), never this one.
DEFAULT_APPROVALS: Mapping[Risk, Approval] = types.MappingProxyType(
    {
        Risk.LOW: Approval.ALLOW,
        Risk.MEDIUM: Approval.ASK,
        Risk.HIGH: Approval.ASK,
    }
)


def as_risk(value: Risk | str) -> Risk:
    return enum_setting(Risk, value, "risk")


def as_approval(value: Approval | str | None) -> Approval | None:
    if value is None:
        return None
    return enum_setting(Approval, value, "approval policy", " (or None for the risk default)")


def is_answer(value: object) -> bool:
    """Whether ``ApprovalAnswer.parse`` reads ``value`` as a real answer, not as the
    ``NO`` that anything unrecognised (``None`` from an approver that forgot to
    return, ``"maybe"``, ``1``) counts as."""
    if isinstance(value, (ApprovalAnswer, bool)):
        return True
    return isinstance(value, str) and value.strip().lower() in _ANSWER_WORDS


_ANSWER_WORDS = {
    "y": ApprovalAnswer.YES,
    "yes": ApprovalAnswer.YES,
    "allow": ApprovalAnswer.YES,
    "n": ApprovalAnswer.NO,
    "no": ApprovalAnswer.NO,
    "deny": ApprovalAnswer.NO,
    "a": ApprovalAnswer.ALWAYS,
    "always": ApprovalAnswer.ALWAYS,
    "v": ApprovalAnswer.NEVER,
    "never": ApprovalAnswer.NEVER,
}


@attrs.frozen
class ApprovalRequest:
    """What an approver is asked about: the call, its tool's risk and description."""

    call: ToolCall
    risk: Risk
    description: str = ""


_Answer = Union[ApprovalAnswer, bool, str]  # noqa: UP007 - a runtime alias must work on 3.10
Approver = Callable[[ApprovalRequest], Union[_Answer, Awaitable[_Answer]]]  # noqa: UP007
"""``approver(request) -> ApprovalAnswer | bool | str`` (or an awaitable of one)."""


def decide(
    remembered: ApprovalAnswer | None,
    policy: Approval | None,
    risk: Risk,
    defaults: Mapping[Risk, Approval],
) -> Approval:
    """The effective policy for one call before asking anyone (see module doc)."""
    if policy is Approval.DENY:
        return Approval.DENY
    if remembered is ApprovalAnswer.NEVER:
        return Approval.DENY
    if remembered is ApprovalAnswer.ALWAYS:
        return Approval.ALLOW
    if policy is not None:
        return policy
    return defaults.get(risk, Approval.ASK)
