"""The ``infersight`` command: one entry point, with subcommands contributed by each component.

Each component folder has a small ``cli.py`` with ``register(subparsers)``; it adds its
subcommands and sets ``func`` to a handler ``(args, config) -> exit code``. Handlers import
their heavy dependencies inside the function so that ``infersight --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from infersight import __version__
from infersight.commands.output import CommandFailed, fail
from infersight.config import ConfigError, load_config

# Order here is the order in `infersight --help`.
COMMAND_MODULES = (
    "infersight.commands.plan",  # plan, version
    "infersight.collectors.cli",  # collect gpu | engine
    "infersight.instrumentation.cli",  # proxy
    "infersight.pipelines.cli",  # receive, db, traces, incident, up
    "infersight.dashboards.cli",  # dashboards
    "infersight.alerts.cli",  # alerts
    "infersight.commands.prometheus",  # prometheus render
    "infersight.simulator.cli",  # simulate
    "infersight.commands.demo",  # demo
)


CONFIG_HELP = "config file (default: $INFERSIGHT_CONFIG, else ./infersight.yaml, else built-in defaults)"


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: it accepts ``--config`` too, so ``infersight traces show ID --config x.yaml``
    works as well as ``infersight --config x.yaml traces show ID``.

    argparse hands ``parser_class`` down to nested subcommands, so every level gets it. The default
    is SUPPRESS: a subcommand that was not given ``--config`` leaves the top-level value alone.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help=CONFIG_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infersight",
        description="Observability and tracing for LLM inference clusters.",
        epilog="Run 'infersight COMMAND --help' for a command's options.",
    )
    parser.add_argument("--config", metavar="PATH", help=CONFIG_HELP)
    parser.add_argument("--version", action="version", version=f"infersight {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands",
                                       parser_class=CommandParser)
    subparsers.required = True
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        return int(args.func(args, config) or 0)
    except ConfigError as exc:
        print(f"infersight: {exc}", file=sys.stderr)
        return 2
    except CommandFailed as exc:
        return fail(exc.command, str(exc), exc.code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`infersight traces show ID | head`): stop quietly, as `cat` does, and
        # point stdout at /dev/null so the interpreter's last flush does not print a second error.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # a stdout without a file descriptor (captured)
            pass
        return 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
