"""Host-cost floors measured beside the entry point in the same process (issue #13).

The host's speed differs between machines and leases by up to 1.5x (docs/kernel-notes.md,
v32), so the entry point's us per call only means something next to what the same
process pays for: a small C++ torch op, and an empty ``@triton.jit`` kernel with a
20-argument paged-attention-like signature launched as ``kernel[grid](...)`` and through
its compiled handle (``compiled[grid](*args)``).  Used by ``bench_paged_attention.py
--host``; on its own (``python benchmarks/host_floors.py``) it prints the floors.
"""

from __future__ import annotations

from typing import Callable, Dict, Tuple

import torch
import triton


@triton.jit
def _empty20(
    out_ptr, es_ptr, ml_ptr, tmp_ptr, q_ptr, k_ptr, v_ptr, bt_ptr, lens_ptr, alibi_ptr,
    scale, n_seqs, n_kv, s0, s1, s2, s3, s4, s5, s6,
):  # fmt: skip
    pass


def floors(host_us: Callable[[Callable[[], object], int], Tuple[float, float]], calls: int) -> Dict:
    """{label: {enqueue_us, wall_us}} for the torch op and the empty kernel, both ways."""
    x = torch.zeros(64, device="cuda")
    y = torch.ones(64, device="cuda")
    z = torch.empty(64, device="cuda")
    ptrs = tuple(torch.zeros(64, device="cuda") for _ in range(10))
    # Integers away from Triton's 1 and multiple-of-16 specializations, as real strides are not.
    args = ptrs + (0.125, 3, 7, 17, 33, 65, 129, 257, 513, 1025)
    grid = (1, 1, 1)
    handle = _empty20[grid](*args)
    fns = {
        "torch_add": lambda: torch.add(x, y, out=z),
        "empty20_plain": lambda: _empty20[grid](*args),
    }
    if hasattr(handle, "__getitem__"):  # Triton >= 3: the compiled kernel's own launcher
        fns["empty20_compiled"] = lambda: handle[grid](*args)
    rows = {}
    for label, fn in fns.items():
        enqueue, wall = host_us(fn, calls)
        rows[label] = {"enqueue_us": enqueue, "wall_us": wall}
    return rows


def main() -> None:
    from bench_common import HOST_CALLS, host_us

    for label, row in floors(host_us, HOST_CALLS).items():
        print(f"{label:<18} {row['enqueue_us']:6.1f} us/call enqueue, {row['wall_us']:6.1f} wall")


if __name__ == "__main__":
    main()
