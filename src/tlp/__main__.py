"""``python -m tlp``: the same command line as ``tlp``."""

import sys

from tlp.cli import main

sys.exit(main())
