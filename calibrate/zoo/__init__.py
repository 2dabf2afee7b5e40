"""calibrate.zoo: an offline model zoo (synthetic multimodal task, tokenizer, tiny LLaVA target/draft/captioner).

No VLM weights can be downloaded here, so the project trains its own on a synthetic visual task where
the image really matters. Modules: :mod:`calibrate.zoo.scenes` (scenes of coloured shapes, rendered with
PIL), :mod:`calibrate.zoo.task` (1-, 2- and 5-image requests in seed 003's Appendix C templates, with
image-fact spans and splits), :mod:`calibrate.zoo.tokenizer` (byte-level BPE on the corpus),
:mod:`calibrate.zoo.models` (HF LLaVA configs, FLOP counts, save/load), :mod:`calibrate.zoo.train`
(``python -m calibrate.zoo.train``). ``import calibrate.zoo`` stays free of torch.
"""

__all__: list[str] = []
