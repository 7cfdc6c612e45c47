"""``python -m hami.demo``: what ``make demo`` runs (``hami.demo.main``)."""

import sys

from hami.demo.main import main

sys.exit(main())
