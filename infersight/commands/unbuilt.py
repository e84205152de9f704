"""A stand-in handler for subcommands whose component has not landed yet."""

from __future__ import annotations

import sys


def unbuilt(what: str):
    def handler(args, config) -> int:
        print(f"infersight: '{what}' is not built yet in this version.", file=sys.stderr)
        return 2

    return handler
