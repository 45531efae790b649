"""``python -m controlscope.cli``: the ``controlscope`` command."""

import sys

from controlscope.cli import main

sys.exit(main())
