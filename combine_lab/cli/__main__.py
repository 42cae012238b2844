"""``python3 -m combine_lab.cli ...`` is the same as ``combine-lab ...`` (and ``python3 -m combine_lab``)."""

import sys

from . import main

sys.exit(main())
