"""Command-line options, declared once, read from the command line, the environment
(`STREAMDEDUP_<OPTION>`) or a TOML file (`--config`), in that order of precedence.

Every option is an `Opt`; the argparse parsers, the environment and TOML lookups and
the configuration reference in the docs are all generated from the same table, so
they cannot drift apart.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamdedup.errors import ConfigError

ENV_PREFIX = "STREAMDEDUP_"


def _bool(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


@dataclass(frozen=True)
class Opt:
    """One option.  `name` is the long flag without dashes (e.g. "num-perm")."""

    name: str
    help: str
    type: Callable[[Any], Any] = str
    default: Any = None
    choices: Sequence[str] | None = None
    metavar: str | None = None
    flag: bool = False  # a switch: --name sets True
    repeat: bool = False  # may be given several times (a list)

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.dest.upper()

    def convert(self, value: Any, source: str) -> Any:
        try:
            if self.repeat:
                items = value if isinstance(value, list) else str(value).split(",")
                return [self.type(v) for v in items if str(v).strip()]
            out = _bool(value) if self.flag else self.type(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"{source}: invalid value {value!r} for --{self.name}: {exc}"
            ) from exc
        if self.choices is not None and out not in self.choices:
            raise ConfigError(
                f"{source}: --{self.name} must be one of {', '.join(self.choices)}, got {out!r}"
            )
        return out


@dataclass(frozen=True)
class OptionGroup:
    title: str
    options: tuple[Opt, ...] = field(default_factory=tuple)


def add_options(parser: argparse.ArgumentParser, groups: Sequence[OptionGroup]) -> None:
    for group in groups:
        g = parser.add_argument_group(group.title)
        for opt in group.options:
            default = "" if opt.default is None else f" (default: {opt.default})"
            env = f" [env: {opt.env}]"
            if opt.flag:
                g.add_argument(
                    f"--{opt.name}",
                    dest=opt.dest,
                    action="store_const",
                    const=True,
                    default=None,
                    help=opt.help + env,
                )
            elif opt.repeat:
                g.add_argument(
                    f"--{opt.name}",
                    dest=opt.dest,
                    action="append",
                    default=None,
                    metavar=opt.metavar or "VALUE",
                    help=opt.help + " (repeatable)" + env,
                )
            else:
                # with choices and no metavar, argparse shows them: --verify {exact,signature}
                g.add_argument(
                    f"--{opt.name}",
                    dest=opt.dest,
                    default=None,
                    metavar=opt.metavar,
                    choices=opt.choices,
                    help=opt.help + default + env,
                )


def load_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    import tomllib  # (only with --config: a run without one does not load the parser)

    try:
        with Path(path).open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


def resolve(
    args: argparse.Namespace,
    groups: Sequence[OptionGroup],
    command: str,
    config: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    commands: Mapping[str, Sequence[OptionGroup]] | None = None,
    inapplicable: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The final value of every option, and which ones were set explicitly.

    TOML keys may sit at the top level or in a table named after the command (which
    wins); dashes and underscores are interchangeable.  A top-level key that belongs
    to another command (one file for worker and replay) is left to it; a key no
    command knows is an error.  So is a key in `inapplicable` (option name without
    dashes -> why), wherever it sits: a setting this command cannot honour although
    a user would expect it to (`ttl` for `dedup`), which leaving to the other
    commands would silently ignore.
    """
    environ = os.environ if environ is None else environ
    opts = {o.dest: o for g in groups for o in g.options}
    from_file: dict[str, Any] = {}
    if config:
        commands = commands or {command: groups}
        elsewhere = {o.dest for gs in commands.values() for g in gs for o in g.options}
        flat = {k: v for k, v in config.items() if not isinstance(v, dict)}
        section = config.get(command, {})
        for scope, shared in (
            (flat, elsewhere),
            (section if isinstance(section, dict) else {}, set()),
        ):
            for key, value in scope.items():
                dest = key.replace("-", "_")
                if inapplicable and dest in inapplicable and dest not in opts:
                    raise ConfigError(
                        f"config file: {key!r} does not apply to '{command}': {inapplicable[dest]}"
                    )
                if dest in opts:
                    from_file[dest] = value
                elif dest not in shared and dest != "config":
                    known = ", ".join(sorted(o.name for o in opts.values()))
                    raise ConfigError(
                        f"config file: unknown option {key!r} for '{command}' (known: {known})"
                    )
    values: dict[str, Any] = {"_explicit": set()}
    for dest, opt in opts.items():
        cli = getattr(args, dest, None)
        if cli is not None:
            values[dest] = opt.convert(cli, "command line")
            values["_explicit"].add(dest)
        elif opt.env in environ:
            values[dest] = opt.convert(environ[opt.env], f"environment {opt.env}")
            values["_explicit"].add(dest)
        elif dest in from_file:
            values[dest] = opt.convert(from_file[dest], "config file")
            values["_explicit"].add(dest)
        else:
            values[dest] = opt.default
    for name, table in config.items() if config else ():
        if isinstance(table, dict) and commands is not None and name not in commands:
            raise ConfigError(f"config file: unknown command table [{name}]")
    return values
