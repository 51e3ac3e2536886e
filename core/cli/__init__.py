"""The ``lectern`` command, one module per group of subcommands (``main`` parses and dispatches)."""
