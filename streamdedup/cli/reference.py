"""The configuration reference (docs/configuration.md), rendered from the options
the command line itself is built from, so the two cannot drift apart (a test
compares the file with this rendering).

    python -m streamdedup.cli.reference > docs/configuration.md
"""

from __future__ import annotations

from streamdedup.cli.options import Opt
from streamdedup.cli.table import COMMANDS, EXAMPLES, INAPPLICABLE


def _default(opt: Opt) -> str:
    if opt.flag:
        return "off"
    if opt.repeat:
        return "none (repeatable)"
    if opt.default is None:
        return "—"
    return f"`{opt.default}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    out = [
        "# Configuration reference",
        "",
        "Generated from the command line's own option definitions "
        "(`python -m streamdedup.cli.reference > docs/configuration.md`); "
        "`tests/test_deploy.py` fails if this file is out of date.",
        "",
        "Every option can be given three ways, the first found wins: the command-line "
        "flag, the environment variable, or a key in a TOML file passed with `--config` "
        "(or `STREAMDEDUP_CONFIG`). In TOML, keys take the flag's name without dashes "
        "(`num-perm = 256` or `num_perm = 256`), at the top level (shared by all "
        "commands) or in a table named after the command (`[worker]`), which wins. "
        "Repeatable options take a list in TOML and a comma-separated list in the "
        "environment. Switches take `true`/`false` (or 1/0, yes/no) in the environment. "
        "A top-level key that only other commands take is left to them, except one a "
        "command cannot honour although a user would expect it to, which it refuses "
        "(exit 2) wherever it sits: "
        + "; ".join(
            f"`{key}` for `{command}`" for command, keys in INAPPLICABLE.items() for key in keys
        )
        + " (files carry no timestamps: nothing would expire).",
        "",
    ]
    for name, (help_text, groups) in COMMANDS.items():
        out += [f"## `streamdedup {name}`", "", help_text[0].upper() + help_text[1:] + ".", ""]
        if EXAMPLES.get(name):
            out += ["```", *EXAMPLES[name], "```", ""]
        for group in groups:
            if not group.options:
                continue
            out += [
                f"### {group.title}",
                "",
                "| flag | environment | default | meaning |",
                "|---|---|---|---|",
            ]
            for opt in group.options:
                flag = f"`--{opt.name}`" + (f" {opt.metavar}" if opt.metavar else "")
                meaning = opt.help.replace("%%", "%")  # (argparse's escape)
                if opt.choices:
                    meaning += " (one of: " + ", ".join(f"`{c}`" for c in opt.choices) + ")"
                out.append(
                    f"| {_cell(flag)} | `{opt.env}` | {_cell(_default(opt))} | {_cell(meaning)} |"
                )
            out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
