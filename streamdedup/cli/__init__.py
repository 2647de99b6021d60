"""The command line: the option table (flags, environment variables, TOML keys), one
entry point that maps every error to its exit status, the commands, and the generator
of the configuration reference in `docs/`."""

from streamdedup.cli.main import entry, main

__all__ = ["entry", "main"]
