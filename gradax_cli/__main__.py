"""``python -m gradax_cli``: the ``gradax`` command."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
