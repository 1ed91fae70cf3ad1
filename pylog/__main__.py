"""``python -m pylog``: the ``pylog`` command (see :mod:`pylog.cli`)."""
import sys

from pylog.cli import main

sys.exit(main())
