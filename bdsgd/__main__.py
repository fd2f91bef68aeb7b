import sys

from bdsgd.cli import main

sys.exit(main())
