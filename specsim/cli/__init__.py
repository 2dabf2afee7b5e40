"""Command line: one module per command (argument parsing and printing only)."""
