"""``python -m reactq.cli``: the ``reactq`` command."""

import sys

from reactq.cli import main

sys.exit(main())
