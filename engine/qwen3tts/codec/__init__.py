"""The 12 Hz speech-tokenizer codec: the whole-utterance decoder and encoder of the port, and the streaming decode
(per-slot state, the plain-PyTorch stream and its fused Triton step) the engine loop's chunk decoder calls."""
