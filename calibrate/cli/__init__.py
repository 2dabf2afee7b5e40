"""Command line of the calibrate half: one module per command (argument parsing and printing only)."""
