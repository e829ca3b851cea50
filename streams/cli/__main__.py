"""``python -m streams.cli``: the same as the ``dripstream`` command."""

from streams.cli import main

raise SystemExit(main())
