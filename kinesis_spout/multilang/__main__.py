"""``python -m kinesis_spout.multilang [--config job.toml]``: see :mod:`.main`."""

from __future__ import annotations

import sys

from kinesis_spout.multilang.main import main

if __name__ == "__main__":
    sys.exit(main())
