"""Training tokens: memory-mapped token files and a byte-level fallback, sampled by step.

Token files are flat arrays of little-endian uint16 or uint32 ids with no header, the
layout nanoGPT's ``prepare.py`` writes (``np.array(ids, dtype=np.uint16).tofile(path)``);
:func:`write_token_file` writes one. The byte fallback reads any file as uint8 ids
(vocabulary 256).

Sampling is a pure function of (seed, step, micro-batch index): the token stream is cut
into non-overlapping windows of ``seq_len + 1`` tokens, each epoch visits them in a seeded
permutation (a single pass, as in the paper's runs, until the data runs out), and the
sequences of global step s are the windows s·B ... s·B + B - 1 of that order. A resumed or
re-sharded run therefore sees exactly the tokens an uninterrupted run would.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mosaic.errors import MosaicInputError

_DTYPES = {"bytes": np.uint8, "uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}


def write_token_file(tokens: np.ndarray, path: str | Path, dtype: str = "uint16") -> Path:
    """Write token ids as a flat little-endian file the loader reads (nanoGPT layout)."""
    if dtype not in ("uint16", "uint32"):
        raise MosaicInputError(f"token file dtype must be uint16 or uint32, got {dtype!r}")
    array = np.asarray(tokens)
    if array.size and (array.min() < 0 or array.max() >= np.iinfo(_DTYPES[dtype]).max + 1):
        raise MosaicInputError(f"token ids out of range for {dtype}")
    path = Path(path)
    array.astype(_DTYPES[dtype]).tofile(path)
    return path


def data_files(path: str | Path | list[Path], field: str = "data.path") -> list[Path]:
    """The files of ``data.path``, each an existing file (MosaicInputError naming one that
    is not, as ``field``: a grid's is ``recipe.data.path``)."""
    paths = [Path(p) for p in path] if isinstance(path, list) else [Path(path)]
    for one in paths:
        if not one.is_file():
            raise MosaicInputError(f"{field} {str(one)!r} does not exist or is not a file")
    return paths


class TokenStream:
    """Deterministic (seed, step, micro-batch) -> (inputs, targets) over a token array."""

    def __init__(self, path: str | Path | list[Path], fmt: str, seq_len: int,
                 seed: int, vocab: int | None = None) -> None:
        self.seq_len, self.seed = seq_len, seed
        self._orders: dict[int, np.ndarray] = {}
        self.vocab = vocab  # ids must lie below it (checked per batch: files may be huge)
        self.synthetic_vocab = None
        if fmt == "synthetic":  # uniform ids from (seed, sequence index): no file at all
            self.synthetic_vocab = vocab or 50257
            self.tokens = np.zeros(0, dtype=np.int64)
            self.windows = 2**62
            return
        if fmt not in _DTYPES:
            raise MosaicInputError(f"data.format must be one of {sorted(_DTYPES)}, got {fmt!r}")
        paths = data_files(path)
        if fmt == "bytes":  # small text corpora: concatenated in memory
            self.tokens = np.frombuffer(b"".join(p.read_bytes() for p in paths), dtype=np.uint8)
        elif len(paths) != 1:
            raise MosaicInputError(f"data.path: format {fmt} reads one token file, got "
                                   f"{len(paths)}; concatenate them first")
        else:
            itemsize = np.dtype(_DTYPES[fmt]).itemsize
            size = paths[0].stat().st_size
            if size % itemsize:
                raise MosaicInputError(f"data.path {str(paths[0])!r}: {size} bytes is not a "
                                       f"whole number of {fmt} tokens")
            self.tokens = (np.memmap(paths[0], dtype=_DTYPES[fmt], mode="r") if size
                           else np.zeros(0, dtype=_DTYPES[fmt]))
        self.windows = (len(self.tokens) - 1) // seq_len
        if self.windows < 1:
            raise MosaicInputError(
                f"data.path holds {len(self.tokens)} tokens; at least run.seq_len + 1 = "
                f"{seq_len + 1} are needed")

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def _order(self, epoch: int) -> np.ndarray:
        """The seeded visiting order of epoch ``epoch`` (the last two are kept)."""
        if epoch not in self._orders:
            if len(self._orders) >= 2:
                self._orders.pop(min(self._orders))
            self._orders[epoch] = np.random.default_rng([self.seed, epoch]).permutation(
                self.windows)
        return self._orders[epoch]

    def sequence(self, index: int) -> np.ndarray:
        """Window ``index`` of the global order: seq_len + 1 consecutive tokens."""
        if self.synthetic_vocab is not None:
            rng = np.random.default_rng([self.seed, index])
            return rng.integers(0, self.synthetic_vocab, self.seq_len + 1, dtype=np.int64)
        epoch, position = divmod(index, self.windows)
        start = int(self._order(epoch)[position]) * self.seq_len
        return np.asarray(self.tokens[start:start + self.seq_len + 1], dtype=np.int64)

    def epochs_for(self, sequences: int) -> float:
        """Passes over the data that ``sequences`` windows make."""
        return sequences / self.windows

    def batch(self, step: int, micro: int, micro_batch_seqs: int, global_batch_seqs: int,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets (micro_batch_seqs, seq_len) of one micro-batch."""
        first = step * global_batch_seqs + micro * micro_batch_seqs
        rows = np.stack([self.sequence(first + j) for j in range(micro_batch_seqs)])
        if self.vocab is not None and rows.size and int(rows.max()) >= self.vocab:
            raise MosaicInputError(
                f"data: token id {int(rows.max())} in step {step}'s batch is not below the "
                f"vocabulary size {self.vocab} (data.vocab); check data.format (uint16 vs "
                "uint32) and data.vocab against the tokenizer")
        block = torch.from_numpy(rows).to(device)
        return block[:, :-1], block[:, 1:]
