"""``python3 -m combine_lab.cli ...`` is the same as ``combine-lab ...`` (and ``python3 -m combine_lab``)."""

import sys

from . import main

if __name__ == "__main__":  # a LocalCluster's worker processes (spawned) import this module too
    sys.exit(main())
