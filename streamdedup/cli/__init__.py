"""The command line.  `table` declares every option (flags, environment variables,
TOML keys) on the machinery of `options`; `main` parses, dispatches and maps every
error to its exit status; `settings` builds the typed settings and holds one check
per rule; the commands live in `dedup`, `tune`, `reports` (stats, inspect),
`kafka_tools` (broker, produce), `verdicts`, `backup` (backup, restore) and `demo`;
`reference`
renders the configuration reference in `docs/`."""

from streamdedup.cli.main import entry, main

__all__ = ["entry", "main"]
