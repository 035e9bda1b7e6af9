"""`python -m journal.viewer`: the viewer without the `journal` command."""

import sys

from .command import main

sys.exit(main())
