"""``python -m overlapscope.cli``: the same as the ``overlapscope`` command."""

import sys

from overlapscope.cli import main

sys.exit(main())
