"""What machine a measurement came from: CPU model, cores, library versions (for benchmark JSON, demo plots)."""

from __future__ import annotations

import datetime
import os
import platform
from typing import Any


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """Python, torch, verl and verl_ext versions, CPU model, core and thread counts, GPU name if any."""
    import torch
    import verl

    from importlib.metadata import version

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "verl": verl.__version__,
        "verl_ext": version("verl_ext"),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def machine_line() -> str:
    """Today's date, CPU (or GPU), core count and library versions in one line."""
    info = machine_info()
    device = info.get("gpu") or f"{info['cpu']} ({info['cpu_count']} cores)"
    return f"{datetime.date.today().isoformat()}, {device}, torch {info['torch']}, verl {info['verl']}"


__all__ = ["cpu_model", "machine_info", "machine_line"]
