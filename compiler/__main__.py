"""`python -m compiler` is the `relaycc` command."""

import sys

from compiler.cli import main

sys.exit(main())
