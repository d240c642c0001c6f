"""Lamina: embeddings and text generation on GGUF models, on the CPU.

A model is a GGUF path, a file name in the models directory ($LAMINA_MODELS,
else ~/.cache/lamina/models), or hf://ORG/REPO[:QUANT] on the Hugging Face
Hub, pulled into its cache on first use (as `lamina pull` does; HF_TOKEN,
HF_HOME and HF_HUB_OFFLINE apply). The GIL is released while the engine
computes; one object may be shared between threads (its calls take turns).
Bad input raises ValueError, a missing model FileNotFoundError, a gated repo
without a token PermissionError, an unreachable hub ConnectionError.
"""

from typing import Iterator, Mapping, Optional, Sequence, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str

class Embedder:
    """An embedding model."""

    def __init__(self, model: str, threads: Optional[int] = None) -> None: ...
    @property
    def dim(self) -> int:
        """Width of the vectors (before `dim` truncation)."""
    @property
    def tasks(self) -> list[tuple[str, str]]:
        """The model's task prompts, (name, prefix)."""
    @overload
    def encode(
        self,
        texts: str,
        task: Optional[str] = None,
        dim: Optional[int] = None,
        batch_size: int = 32,
        normalize: bool = True,
        truncate: bool = False,
        prompt_name: Optional[str] = None,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    def encode(
        self,
        texts: Sequence[str],
        task: Optional[str] = None,
        dim: Optional[int] = None,
        batch_size: int = 32,
        normalize: bool = True,
        truncate: bool = False,
        prompt_name: Optional[str] = None,
    ) -> npt.NDArray[np.float32]:
        """Vectors of shape (n, d) for a list, (d,) for one string."""
    def tokenize(self, text: str) -> list[int]: ...

class TextStream(Iterator[str]):
    """Pieces of a generation as they are made; dropping it stops it."""

    def __iter__(self) -> "TextStream": ...
    def __next__(self) -> str: ...

class Generator:
    """A text-generation model; `ctx` is its context in tokens."""

    def __init__(self, model: str, threads: Optional[int] = None, ctx: Optional[int] = None) -> None: ...
    @property
    def n_ctx(self) -> int: ...
    def generate(
        self,
        prompt: str,
        max_tokens: Optional[int] = None,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[Sequence[str]] = None,
    ) -> str: ...
    def stream(
        self,
        prompt: str,
        max_tokens: Optional[int] = None,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[Sequence[str]] = None,
    ) -> TextStream: ...
    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        max_tokens: Optional[int] = None,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[Sequence[str]] = None,
        stream: bool = False,
    ) -> Union[str, TextStream]: ...
    def tokenize(self, text: str) -> list[int]: ...
    def detokenize(self, ids: Sequence[int]) -> str: ...
