"""`python -m gradax`: the `gradax` command, which lives in :mod:`gradax_cli`.

The command (demo, tuning, plotting, benchmarks) is a package of its own in
the same distribution, so the library never imports it: only
`python -m gradax` runs this file, and `import gradax` never loads it.
"""

import sys

from gradax_cli import main

if __name__ == "__main__":
    sys.exit(main())
