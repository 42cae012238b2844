"""``python3 -m combine_lab ...`` is the same as ``combine-lab ...``."""

import sys

from .cli import main

if __name__ == "__main__":  # a LocalCluster's worker processes (spawned) import this module too
    sys.exit(main())
