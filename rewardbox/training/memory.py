"""Peak memory of a block of work: resident set size on CPU, allocator peak on CUDA.

The process-wide ``ru_maxrss`` only ever grows, so it cannot give one step's
peak; ``PeakMemory`` samples the resident set size (``psutil``) from a
background thread while the block runs, and on CUDA reads
``torch.cuda.max_memory_allocated`` after resetting it.
"""

from __future__ import annotations

import threading

import psutil
import torch


class PeakMemory:
    """Context manager: ``peak_bytes`` after exit is the block's peak memory, bytes.

    Args:
        interval_s: RSS sampling period, seconds (peaks shorter than this may be missed).
        device: ``"cuda"`` reads the allocator's peak instead of sampling RSS.
    """

    def __init__(self, interval_s: float = 0.005, device: str | torch.device = "cpu"):
        self.interval_s = interval_s
        self.cuda = torch.device(device).type == "cuda"
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        process = psutil.Process()
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, process.memory_info().rss)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakMemory:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        else:
            self._thread = threading.Thread(target=self._sample, name="PeakMemory", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            self.peak_bytes = int(torch.cuda.max_memory_allocated())
        else:
            self._stop.set()
            self._thread.join()
            self.peak_bytes = max(self.peak_bytes, psutil.Process().memory_info().rss)
