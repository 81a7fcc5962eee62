"""The GGUF conversion parses the file once (``checkpoint._one_gguf_parse``), not once per
``from_pretrained`` (config, tokenizer, model)."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from rewardbox.policy.checkpoint import _one_gguf_parse


def test_one_reader_per_file_inside_the_block_and_the_library_restored_after(monkeypatch):
    built: list[str] = []

    class CountingReader:
        def __init__(self, path, mode="r"):
            built.append(str(path))
            self.path, self.mode = str(path), mode

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    with _one_gguf_parse():
        first = gguf.GGUFReader("/m/a.gguf")
        assert gguf.GGUFReader(Path("/m/a.gguf")) is first  # str or Path: the same file
        other = gguf.GGUFReader("/m/b.gguf")
        assert other is not first and gguf.GGUFReader("/m/a.gguf", "r+") is not first
    assert built == ["/m/a.gguf", "/m/b.gguf", "/m/a.gguf"]
    assert gguf.GGUFReader is CountingReader
    fresh = gguf.GGUFReader("/m/a.gguf")
    assert fresh is not first and len(built) == 4


def test_the_library_is_restored_when_the_block_raises(monkeypatch):
    class Reader:
        def __init__(self, path):
            self.path = path

    monkeypatch.setattr(gguf, "GGUFReader", Reader)
    with pytest.raises(ValueError, match="conversion failed"), _one_gguf_parse():
        raise ValueError("conversion failed")
    assert gguf.GGUFReader is Reader
