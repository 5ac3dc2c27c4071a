import sys

from recbole_ext.cli import main

sys.exit(main())
