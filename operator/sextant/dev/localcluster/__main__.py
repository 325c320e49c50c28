"""`python -m sextant.dev.localcluster up|env|down|build`."""

import sys

from . import main

sys.exit(main())
