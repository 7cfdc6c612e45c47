"""``python -m hami.scheduler``."""

import sys

from hami.scheduler.extender.main import main

sys.exit(main())
