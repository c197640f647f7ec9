"""CLI subcommands: one module per command group, each with `register(subparsers)`."""
