"""`python -m sextant.localcluster up|env|down|build`."""

import sys

from . import main

sys.exit(main())
