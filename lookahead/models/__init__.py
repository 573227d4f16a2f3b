"""Model files: named models from PyPI data packages and the GGUF header check."""
