# SPDX-License-Identifier: MIT
"""``python -m mp13chat``: the same as the ``mp13chat`` console script."""

import sys

from mp13chat import main

if __name__ == "__main__":
    sys.exit(main())
