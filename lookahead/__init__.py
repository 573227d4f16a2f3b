"""lookahead: model-free speculative decoding for llama.cpp on ordinary CPUs."""
