"""The decoding core: drafts, acceptance, sampling, the cost-aware controller and the loop.

No module here imports llama.cpp."""
