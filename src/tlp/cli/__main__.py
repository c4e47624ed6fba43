"""``python -m tlp.cli``: the same command line as ``tlp`` (``python -m tlp`` too)."""

import sys

from tlp.cli import main

sys.exit(main())
