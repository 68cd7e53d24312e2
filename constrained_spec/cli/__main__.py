"""``python -m constrained_spec.cli``: the same as the ``constrained-spec`` command."""

import sys

from constrained_spec.cli.commands import main

sys.exit(main())
