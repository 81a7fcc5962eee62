"""verl's actor checkpoint into a Hugging Face directory: the merger run in verl's environment, then finished here.

:func:`merge_verl_checkpoint` runs verl's ``FSDPModelMerger`` through ``rewardbox.training.verl.merge``
(in verl's environment: the dtype the actor was saved in is kept, a tie that no longer holds is
untied, and ``merge_fidelity.json`` says how far the saved weights are from the trained ones), then
:func:`finish_verl_merge` makes ``out_dir`` of what it wrote (a LoRA adapter merged with peft).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)
MERGER_MODULE = "rewardbox.training.verl.merge"
FIDELITY_REPORT = "merge_fidelity.json"
_ROOT = Path(__file__).resolve().parents[3]


def merge_command(
    python: str,
    actor_dir: str | Path,
    target_dir: str | Path,
    dtype: str = "keep",
    rtol: float = 0.0,
    atol: float = 0.0,
) -> list[str]:
    """verl's model merger argv: an FSDP ``actor`` checkpoint into a Hugging Face directory.

    Runs verl's ``FSDPModelMerger`` through ``rewardbox.training.verl.merge`` (dtype kept, a
    broken tie untied, ``merge_fidelity.json`` written: see that module).
    """
    return [
        python,
        "-m",
        MERGER_MODULE,
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(actor_dir),
        "--target_dir",
        str(target_dir),
        "--dtype",
        dtype,
        "--rtol",
        repr(rtol),
        "--atol",
        repr(atol),
    ]


def merge_verl_checkpoint(
    actor_dir: str | Path,
    base_dir: str | Path,
    out_dir: str | Path,
    python: str,
    timeout_s: float = 3600.0,
    lora_alpha: float | None = None,
    log: Callable[[str], None] | None = None,
    dtype: str = "keep",
    tolerance: tuple[float, float] = (0.0, 0.0),
) -> Path:
    """Merge verl's ``actor_dir`` into a Hugging Face checkpoint at ``out_dir`` with verl's model merger.

    The merger (:func:`merge_command`) writes into ``<out_dir>.merger``; :func:`finish_verl_merge`
    then makes ``out_dir`` of it.

    Args:
        lora_alpha, log: as :func:`finish_verl_merge`.
        dtype: ``keep`` (the actor checkpoint's dtype) or a dtype to cast to (``verl_merge``).
        tolerance: (rtol, atol) of each saved weight against the trained one, recorded in
            ``merge_fidelity.json`` (the blocking gate enforces it).

    Raises:
        FileNotFoundError: ``actor_dir`` or verl's Python is missing.
        RuntimeError: the merger failed or ran past ``timeout_s`` (its output tail in the message).
        ValueError: verl's LoRA adapter does not load into the base (:func:`finish_verl_merge`).
    """
    actor_dir, out_dir = Path(actor_dir), Path(out_dir)
    if not actor_dir.is_dir():
        raise FileNotFoundError(f"no verl checkpoint at {actor_dir}")
    if not Path(python).exists() and shutil.which(python) is None:
        raise FileNotFoundError(
            f"verl's Python {python} not found: run `make verl-env` or set REWARDBOX_VERL_PYTHON"
        )
    staging = out_dir.with_name(out_dir.name + ".merger")  # not merge_checkpoint's own ".partial"
    _run_merger(merge_command(python, actor_dir, staging, dtype, *tolerance), staging, timeout_s)
    return finish_verl_merge(staging, base_dir, out_dir, lora_alpha, log)


def finish_verl_merge(
    merger_dir: str | Path,
    base_dir: str | Path,
    out_dir: str | Path,
    lora_alpha: float | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """``out_dir`` from what verl's model merger wrote into ``merger_dir`` (which is consumed).

    Merged weights (a full fine-tune) become ``out_dir`` as they are, with the base's chat
    template files (``*.jinja``), as the local merge does, and the merger's
    ``merge_fidelity.json`` (logged, and kept in ``out_dir`` for the blocking gate). A LoRA adapter (``lora_adapter/``,
    next to the merger's unmerged base) is first put into peft's exact layout
    (``verl_adapter.normalize_verl_adapter``: tensor names, target modules, a zero alpha), then
    merged into ``base_dir`` with ``checkpoint.merge_checkpoint``, which fails unless peft loaded
    every LoRA tensor. ``out_dir`` is replaced only when the result is complete.

    Args:
        lora_alpha: the run's ``grpo.lora_alpha``, used only when verl wrote alpha 0.
        log: receives one line per fix made to verl's adapter (default: this module's logger).

    Raises:
        ValueError: verl's adapter does not load into the base (see ``normalize_verl_adapter``).
    """
    from rewardbox.training.checkpoint import merge_checkpoint
    from rewardbox.training.verl.adapter import ADAPTER_CONFIG, ADAPTER_DIR, normalize_verl_adapter

    merger_dir, base_dir, out_dir = Path(merger_dir), Path(base_dir), Path(out_dir)
    report = merger_dir / FIDELITY_REPORT
    if report.is_file():
        (log or logger.info)(f"verl merge fidelity: {report.read_text().strip()}")
    adapter = merger_dir / ADAPTER_DIR
    if (adapter / ADAPTER_CONFIG).is_file():
        for change in normalize_verl_adapter(adapter, lora_alpha):
            (log or logger.info)(f"verl's LoRA adapter: {change}")
        merge_checkpoint(base_dir, adapter, out_dir)
        if report.is_file():
            shutil.copy2(report, out_dir / FIDELITY_REPORT)
        shutil.rmtree(merger_dir, ignore_errors=True)
        return out_dir
    for extra in base_dir.glob("*.jinja"):
        shutil.copy2(extra, merger_dir / extra.name)
    shutil.rmtree(out_dir, ignore_errors=True)
    merger_dir.rename(out_dir)
    return out_dir


def _run_merger(argv: list[str], target_dir: Path, timeout_s: float) -> None:
    """Run the merger ``argv`` into a fresh ``target_dir``; RuntimeError with its output tail on failure."""
    shutil.rmtree(target_dir, ignore_errors=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(_ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(
            f"verl's model merger ran past {timeout_s:g} s into {target_dir}"
        ) from exc
    if proc.returncode != 0:
        raise RuntimeError(
            f"verl's model merger failed (exit {proc.returncode}):\n"
            f"{(proc.stderr or proc.stdout).strip()[-3000:]}"
        )


def read_fidelity(checkpoint_dir: str | Path) -> dict | None:
    """The ``merge_fidelity.json`` of a merged checkpoint (``verl_merge.fidelity_report``), or None without one."""
    path = Path(checkpoint_dir) / FIDELITY_REPORT
    return json.loads(path.read_text()) if path.is_file() else None
