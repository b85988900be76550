"""``python -m mmpar.compat.install``: see :mod:`mmpar.compat.install`."""

from mmpar.compat.install.cli import main

raise SystemExit(main())
