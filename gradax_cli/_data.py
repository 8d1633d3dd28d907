"""Text for ``gradax demo``: the Python standard library's source, or any file.

The default corpus needs no download: it is the ``.py`` files of the Python
standard library installed next to the running interpreter (without
``site-packages`` and the ``test`` packages), split into training and
validation by file, so validation text comes from modules the model never saw.
The split depends only on each file's path inside the library.
"""

from __future__ import annotations

import dataclasses
import os
import sysconfig
import zlib
from pathlib import Path

import numpy as np

# Directories of the standard library that are not its own source (installed
# packages) or are mostly test data.
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests"}
# One file in this many (by a hash of its path) goes to validation.
_VALIDATION_EVERY = 10
# Characters beyond the most frequent ones share the "unknown" id 0.
MAX_VOCAB = 256


class DataError(Exception):
    """A problem with the training text, explained in one line."""


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Encoded training and validation text and its alphabet."""

    train: np.ndarray
    validation: np.ndarray
    alphabet: str  # alphabet[i] is the character of id i (id 0: unknown)
    source: str
    documents: tuple[int, int]  # (training, validation) files; (0, 0) for --data

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet)


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's own ``.py`` files, sorted by relative path."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if name not in _SKIP_DIRS]
        files += [Path(folder, name) for name in names if name.endswith(".py")]
    return sorted(files, key=lambda path: path.relative_to(root).as_posix())


def is_validation_file(relative_path: str) -> bool:
    """Whether a file (by its path inside the library) is held out."""
    return zlib.crc32(relative_path.encode()) % _VALIDATION_EVERY == 0


def _codes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def build_alphabet(text: str, max_size: int = MAX_VOCAB) -> str:
    """The unknown marker, then the most frequent characters in code order."""
    counts = np.bincount(_codes(text))
    counts[0] = 0  # NUL is the unknown marker
    present = np.flatnonzero(counts)
    # Most frequent first; ties broken by code point, so the result is unique.
    ranked = present[np.lexsort((present, -counts[present]))][: max_size - 1]
    return "\0" + "".join(map(chr, np.sort(ranked)))


def encode(text: str, alphabet: str) -> np.ndarray:
    """Character ids (uint8) of ``text``; characters not in ``alphabet`` map to 0."""
    codes = _codes(text)
    known = _codes(alphabet)
    table = np.zeros(max(int(codes.max(initial=0)), int(known.max())) + 1, np.uint8)
    table[known] = np.arange(len(known), dtype=np.uint8)
    return table[codes]


def _finish(
    train_text: str, val_text: str, source: str, docs: tuple[int, int], min_len: int
) -> Corpus:
    for name, text in (("training", train_text), ("validation", val_text)):
        if len(text) < min_len:
            raise DataError(
                f"{source}: the {name} text has {len(text)} characters; "
                f"at least {min_len} are needed (context length + 1)"
            )
    alphabet = build_alphabet(train_text)
    return Corpus(
        encode(train_text, alphabet), encode(val_text, alphabet), alphabet, source, docs
    )


def stdlib_corpus(min_len: int, root: Path | None = None) -> Corpus:
    """The standard library's source, split by file."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    files = stdlib_files(root)
    if not files:
        raise DataError(
            f"no Python source files found in the standard library at {root}; "
            "pass --data FILE to train on a text file"
        )
    train, val = [], []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        held_out = is_validation_file(path.relative_to(root).as_posix())
        (val if held_out else train).append(text)
    if not val:  # a tiny library: hold out the last file
        val.append(train.pop())
    source = f"Python {sysconfig.get_python_version()} standard library ({root})"
    return _finish(
        "\n".join(train), "\n".join(val), source, (len(train), len(val)), min_len
    )


def file_corpus(path: Path, min_len: int) -> Corpus:
    """Any text file: the first 90% trains, the last 10% validates."""
    if not path.exists():
        raise DataError(f"data file not found: {path}")
    if path.is_dir():
        raise DataError(f"data path is a directory, not a text file: {path}")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise DataError(f"cannot read data file {path}: {error.strerror}") from None
    if not text.strip():
        raise DataError(f"data file is empty: {path}")
    cut = int(len(text) * 0.9)
    return _finish(text[:cut], text[cut:], str(path), (0, 0), min_len)


def sample_batch(data: np.ndarray, batch_size: int, length: int, seed: tuple):
    """``batch_size`` random windows of ``length`` ids; the same for the same seed."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(data) - length + 1, size=batch_size)
    return data[starts[:, None] + np.arange(length)].astype(np.int32)
