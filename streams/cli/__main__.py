"""``python -m dripstream.streams.cli``: the same as the ``dripstream`` command."""

from dripstream.streams.cli import main

raise SystemExit(main())
