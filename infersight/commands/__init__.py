"""Subcommands that belong to the core package (plan, version, demo)."""
