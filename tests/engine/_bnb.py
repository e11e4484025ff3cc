# SPDX-License-Identifier: Apache-2.0
"""Skip tests that quantize on the CPU where bitsandbytes cannot.

bitsandbytes is a dependency, but one may be missing, or be a release without a CPU
backend (``supported_torch_devices`` lacks ``"cpu"``; releases before that list had CUDA
only). The engine refuses both with ``MissingDependencyError`` (tested in
tests/engine/test_engine_quant.py without real 4-bit / 8-bit layers); tests that need
those layers skip, saying why.
"""

from __future__ import annotations

import importlib

import pytest


def _why_not() -> str | None:
    """Why bitsandbytes cannot quantize on the CPU here, or None when it can."""
    try:
        bnb = importlib.import_module("bitsandbytes")
    except ImportError as exc:
        return f"bitsandbytes is not installed ({exc})"
    devices = set(getattr(bnb, "supported_torch_devices", None) or ())
    if "cpu" in devices:
        return None
    return (
        f"bitsandbytes {getattr(bnb, '__version__', '?')} has no CPU backend "
        f"(supported devices: {sorted(devices) or 'not listed'})"
    )


WHY_NOT = _why_not()

#: Marks a test that needs real bitsandbytes layers on the CPU.
needs_bitsandbytes_cpu = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


def require_bitsandbytes_cpu() -> None:
    """Skip the calling module unless bitsandbytes imports and has a CPU backend."""
    if WHY_NOT is not None:
        pytest.skip(WHY_NOT, allow_module_level=True)
