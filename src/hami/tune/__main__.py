import sys

from hami.tune.main import main

sys.exit(main())
