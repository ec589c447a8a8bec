"""``python -m reactq.cli``: the ``reactq`` command."""

import sys

from reactq.cli import main

# Guarded: the error-tree test imports every module of the package.
if __name__ == "__main__":
    sys.exit(main())
