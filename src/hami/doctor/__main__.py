import sys

from hami.doctor.main import main

sys.exit(main())
