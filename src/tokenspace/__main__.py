"""python -m tokenspace: the `tokenspace` command without the console script."""
import sys

from tokenspace.cli import main

sys.exit(main())
