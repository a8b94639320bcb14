"""``python -m tpuc`` is the ``tpuc`` command."""
import sys

from .cli import main

sys.exit(main())
