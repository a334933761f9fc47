"""``python -m headwatch``: the ``headwatch`` command."""

import sys

from headwatch.cli import main

if __name__ == "__main__":
    sys.exit(main())
