import sys

from devshim.cli import main

sys.exit(main())
