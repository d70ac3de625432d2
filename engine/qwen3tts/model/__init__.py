"""The reference port of Qwen3-TTS 12 Hz in plain PyTorch: config, checkpoint loading, text front end, Talker, code
predictor, speaker encoder, sampling rules, and eager batch-1 generation (`Qwen3TTS`, generate.py), the reference
the batched engine is tested against."""
