"""Validation against published GPU measurements: the cited set, row prediction, fits,
leave-one-source-out."""
