"""Prediction: one pricing path for a request (or a batch) under a profile, end to end, sweeps."""
