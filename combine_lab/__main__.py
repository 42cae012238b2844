"""``python3 -m combine_lab ...`` is the same as ``combine-lab ...``."""

import sys

from .cli import main

sys.exit(main())
