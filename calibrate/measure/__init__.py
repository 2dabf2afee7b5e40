"""Measurements: latency grids, acceptance traces, real check runs, exported engine counters."""
