"""``python -m hami.exporter`` = ``hami-monitor``."""

import sys

from hami.exporter.main import main

sys.exit(main())
