"""The command line.  `table` declares every option (flags, environment variables,
TOML keys; its groups in `engine_options` and `service_options`) on the machinery of
`options`; `main` parses, dispatches and maps every
error to its exit status; `settings` builds the typed settings and holds one check
per rule; the commands live in `dedup`, `tune`, `reports` (stats, inspect),
`kafka_tools` (broker, produce), `verdicts`, `backup` (backup, restore) and `demo`;
`reference`
renders the configuration reference in `docs/`.

numpy's OpenBLAS starts a thread per core when it loads, and each spins a while:
0.05 s of a one-second `dedup` run, for linear algebra streamdedup never does.  The
command owns its process, so it asks for one thread before numpy is imported (a value
already in the environment wins).
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from streamdedup.cli.main import entry, main  # (after the setting above)

__all__ = ["entry", "main"]
