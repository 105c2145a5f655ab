"""`python -m mt_magic serve|status`, the same as the `mt-magic` command."""

import sys

from mt_magic.cli import main

sys.exit(main())
