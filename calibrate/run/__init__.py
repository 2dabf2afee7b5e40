"""Running speculative decoding: the engine's phases and records, token trees, the drafter protocol, the
timing primitive."""
