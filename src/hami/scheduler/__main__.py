"""``python -m hami.scheduler``."""

import sys

from hami.scheduler.main import main

sys.exit(main())
