"""``python -m loadtest.chaos`` is ``python -m testing.chaos``: the fault run
lives in the testing package; this name is kept for the commands people know."""

from __future__ import annotations

import sys

from testing.chaos import main

if __name__ == "__main__":
    sys.exit(main())
