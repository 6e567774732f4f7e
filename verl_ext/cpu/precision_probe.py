"""How fast this CPU multiplies in bf16 against fp32 at the model's shapes: measured once per machine, cached.

CPU mode's precision is what the recipe or the user chose (:mod:`verl_ext.cpu.precision`), never the CPU's flags,
because a flag says an instruction exists, not that torch's kernels are fast with it (an Intel Xeon with
``avx512_bf16`` and no AMX multiplied a 2048x576 @ 576x1536 matmul at 172-178 GFLOPS in bf16 against 296-350 in fp32).
So the start-up line reports what a short probe measured here: one matmul of :data:`TOKENS` rows at the model's
hidden and MLP sizes (``config.json``'s ``hidden_size`` and ``intermediate_size``), in both dtypes, the median of
:data:`ROUNDS` timings each. The result is cached per CPU model, bf16 flags, torch version and shape in
``~/.cache/verl_ext/precision_probe.json`` (``XDG_CACHE_HOME`` moves it), written atomically; the probe costs about a
second the first time. Where the other precision is at least :data:`SUGGEST` times faster, the line suggests it.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from verl_ext.cpu.precision import BF16_FLAGS, KEY, bf16_flags, cpu_flags

TOKENS = 512
"""Rows of the probe's matmul (a micro-batch's tokens)."""
DEFAULT_SHAPE = (576, 1536)
"""(hidden, intermediate) when the model's ``config.json`` cannot be read: SmolLM2-135M's."""
ROUNDS = 5
"""Timed repetitions per dtype (after one warm-up); the median counts."""
SUGGEST = 1.3
"""The other precision is suggested when its matmuls run at least this many times as fast."""


@dataclass(frozen=True)
class Speed:
    """The probe's result on this machine."""

    cpu: str
    """The CPU's model name (``/proc/cpuinfo``)."""
    shape: tuple[int, int, int]
    """(rows, hidden, intermediate) of the matmul ``rows x hidden @ hidden x intermediate``."""
    fp32_gflops: float
    """fp32 throughput."""
    bf16_gflops: float | None
    """bf16 throughput; ``None`` on a CPU without bf16 instructions (not measured: torch would emulate them)."""
    cached: bool = False
    """Read from the cache rather than measured now."""

    @property
    def ratio(self) -> float | None:
        """bf16's throughput over fp32's (> 1: bf16 is faster)."""
        return None if self.bf16_gflops is None else self.bf16_gflops / self.fp32_gflops

    def describe(self, current: str) -> str:
        """What the start-up line says, for the precision ``current`` the run uses."""
        m, k, n = self.shape
        where = f"{m}x{k} @ {k}x{n} on {self.cpu}{', cached' if self.cached else ''}"
        if self.ratio is None:
            return f"fp32 matmuls at the model's shapes: {self.fp32_gflops:.0f} GFLOPS ({where}; no bf16 instructions)"
        text = (f"bf16 matmuls at the model's shapes run at {self.ratio:.2f}x fp32's speed ({self.bf16_gflops:.0f} vs "
                f"{self.fp32_gflops:.0f} GFLOPS, {where})")  # fmt: skip
        if current == "fp32" and self.ratio >= SUGGEST:
            text += f": {KEY}=bf16 would be faster here (and compute in bf16)"
        elif current == "bf16" and self.ratio <= 1 / SUGGEST:
            text += f": {KEY}=fp32 would be faster here"
        return text


def cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name, or the machine's architecture where the file has none."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return " ".join(value.split())
    except OSError:
        pass
    import platform

    return platform.machine() or "unknown CPU"


def model_shape(model_path: Any) -> tuple[int, int]:
    """(hidden, intermediate) from the model folder's ``config.json``; :data:`DEFAULT_SHAPE` where it is not local
    or lacks them (a hub id, a model not built yet)."""
    try:
        config = json.loads((Path(str(model_path)) / "config.json").read_text())
        return int(config["hidden_size"]), int(config["intermediate_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_SHAPE


def measure(shape: tuple[int, int, int], dtype_name: str, rounds: int = ROUNDS) -> float:
    """GFLOPS of ``rows x hidden @ hidden x intermediate`` in ``dtype_name`` (``float32`` / ``bfloat16``)."""
    import torch

    m, k, n = shape
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    torch.matmul(a, b)  # warm-up
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - start)
    return 2.0 * m * k * n / max(statistics.median(times), 1e-9) / 1e9


def cache_path() -> Path:
    """Where results are cached."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "verl_ext" / "precision_probe.json"


def probe(model_path: Any, flags: set[str] | None = None, cache: Path | None = None) -> Speed:
    """This machine's :class:`Speed` at ``model_path``'s shapes: from the cache, or measured now and cached."""
    import torch

    flags = cpu_flags() if flags is None else flags
    found = bf16_flags(flags)
    shape = (TOKENS, *model_shape(model_path))
    cpu = cpu_name()
    key = f"{cpu}|{','.join(found) or 'no-bf16'}|torch {torch.__version__}|{'x'.join(map(str, shape))}"
    cache = cache_path() if cache is None else cache
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known.get(key), dict):
        entry = known[key]
        return Speed(cpu, shape, float(entry["fp32_gflops"]), entry.get("bf16_gflops"), cached=True)
    fp32 = measure(shape, "float32")
    bf16 = measure(shape, "bfloat16") if found else None
    speed = Speed(cpu, shape, fp32, bf16)
    known[key] = {k: v for k, v in asdict(speed).items() if k in ("fp32_gflops", "bf16_gflops")}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_suffix(".json.partial")
        partial.write_text(json.dumps(known, indent=1, sort_keys=True))
        os.replace(partial, cache)
    except OSError as exc:  # the run goes on: an unwritable cache costs a probe at the next start
        print(f"warning: the precision probe's cache {cache} could not be written ({exc}); it will probe again",
              file=sys.stderr)  # fmt: skip
    return speed


__all__ = ["BF16_FLAGS", "DEFAULT_SHAPE", "ROUNDS", "SUGGEST", "Speed", "TOKENS", "cache_path", "cpu_name", "measure",
           "model_shape", "probe"]  # fmt: skip
