"""llama.cpp's dialect: `/completion`, `/infill`, `/tokenize`, `/detokenize`, `/props`, `/slots`
(request bodies, their jobs, the editor's stops, and the answers in llama-server's shape)."""
