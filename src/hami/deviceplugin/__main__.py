"""``python -m hami.deviceplugin``."""

import sys

from hami.deviceplugin.main import main

sys.exit(main())
