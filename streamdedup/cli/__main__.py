"""`python -m streamdedup.cli`: the `streamdedup` command."""

import sys

from streamdedup.cli.main import entry

sys.exit(entry())
