# SPDX-License-Identifier: MIT
"""The layering rules of DESIGN.md: toolbox and context never import torch."""

import subprocess
import sys


def test_toolbox_and_context_do_not_import_torch():
    code = (
        "import sys, mp13_toolbox, mp13_context, mp13_engine; "
        "print(','.join(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_toolbox_imports_nothing_of_ours():
    code = (
        "import sys, mp13_toolbox; "
        "print(','.join(m for m in sys.modules if m.split('.')[0] in "
        "('mp13_engine', 'mp13_context', 'mp13chat')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
