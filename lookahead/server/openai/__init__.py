"""OpenAI's dialect: `/v1/chat/completions`, `/v1/completions`, `/v1/models` (request bodies,
their jobs, and the answers in OpenAI's shape)."""
