"""The workload of a run: models, prompts and encoded requests, methods and captioner."""
