"""Peak memory of a block on CPU (no allocator statistics there) from the PyTorch profiler's memory events.

``profile_memory=True`` attributes every allocation and free to the operator that made it (forward and
backward alike); replaying the events in time order and taking the largest running sum gives the peak of
what the block allocated on top of its inputs. Allocations freed inside a single operator are netted out,
so this is a slight under-estimate, equal for the losses compared side by side. On CUDA the benchmark uses
``torch.cuda.max_memory_allocated`` instead.
"""

from __future__ import annotations

from typing import Callable

from torch.profiler import ProfilerActivity, profile


def cpu_peak_bytes(fn: Callable[[], object]) -> int:
    """Run ``fn`` once under the profiler and return the peak of its net allocations in bytes."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    live = peak = 0
    for event in events:
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak
