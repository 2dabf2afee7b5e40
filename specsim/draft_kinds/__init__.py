"""Drafting kinds (a draft model, EAGLE/EAGLE-3 heads, MTP heads, n-gram and suffix lookup): the registry
(:mod:`.registry`), the heads' shapes (:mod:`.heads`) and the lookup's cost (:mod:`.ngram_lookup`)."""
