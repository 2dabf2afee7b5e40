"""Loading models: HF ids, local folders, GGUF files, presets, placement, placeholder ids, the reference
pair; the loaded model and its synthetic inputs for timing."""
