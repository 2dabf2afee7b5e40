"""Predicted vs measured speculative decoding: comparison, sampled mode, tables."""
