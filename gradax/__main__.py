"""``python -m gradax``: the ``gradax`` command (see :mod:`gradax.cli`).

Only ``python -m gradax`` runs this file; ``import gradax`` never loads it.
"""

import sys

from gradax.cli import main

if __name__ == "__main__":
    sys.exit(main())
