"""The command line: `python -m imageloader COMMAND ...`, one subcommand per tool module.

    python -m imageloader pack SRC OUT.tgz [--shards N] [--shuffle-seed S]   # folder -> archive
    python -m imageloader summary ARCHIVE... [--decode]                      # what an archive holds

`python -m imageloader COMMAND --help` lists a command's flags.
"""
from __future__ import annotations

import importlib
import logging
import sys

COMMANDS = {
    "pack": "a folder of <class>/<file> images -> reproducible .tgz archive(s)",
    "summary": "classes, counts, sizes and bad members of archives",
}


def usage() -> str:
    lines = ["usage: python -m imageloader COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<8} {text}" for name, text in COMMANDS.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        sys.stderr.write(f"imageloader: unknown command {command!r}\n\n{usage()}")
        return 2
    module = importlib.import_module(f".{command}", __package__)
    parser = module.get_args_parser()
    parser.prog = f"python -m imageloader {command}"
    args = parser.parse_args(rest)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        result = module.main(args)
    except (ValueError, OSError) as error:  # wrong input: the message says what to do
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
