"""Input builders shared by the kernel tests (CPU and GPU)."""

from __future__ import annotations

from typing import List, Optional

import torch

from vllm_codemod.kernels.paged_inputs import decode_case
from vllm_codemod.kernels.reference import reference_for_args


def make_inputs(
    seq_lens: List[int],
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    block_size: int,
    dtype: torch.dtype,
    device: str = "cpu",
    alibi: bool = False,
    extra_partitions: int = 0,
    extra_blocks: int = 3,
    seed: int = 0,
    fp8_dtype: Optional[torch.dtype] = None,
):
    """Random caches with randomly permuted blocks, NaN-poisoned outputs and buffers, NaN
    in every cache slot no sequence owns (fp8 caches: junk) and junk past each table row."""
    g = torch.Generator().manual_seed(seed)
    a = decode_case(
        seq_lens, num_heads, num_kv_heads, head_size, block_size, dtype, device, g,
        extra_partitions=extra_partitions, spare_blocks=extra_blocks, poison=True,
        fp8_dtype=fp8_dtype,
    )  # fmt: skip
    if alibi:
        a["alibi_slopes"] = (torch.rand(num_heads, generator=g) * 0.1).to(device)
    return a


def shifted(t: torch.Tensor, elems: int = 1) -> torch.Tensor:
    """``t``'s values in a tensor whose data pointer lies ``elems`` elements past an
    aligned allocation, with ``t``'s shape and strides (contiguous ``t``): how vLLM's
    mixed batches slice ``seq_lens_tensor[num_prefills:]``."""
    backing = torch.zeros(t.numel() + elems, dtype=t.dtype, device=t.device)
    backing[elems:] = t.reshape(-1)
    return backing[elems:].view(t.shape)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.detach().to(torch.float64).cpu()
    ref = ref.to(torch.float64).cpu()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def tolerance(dtype: torch.dtype) -> float:
    return 1e-4 if dtype == torch.float32 else 2e-2


def reference_of(a, seqs: List[int], lens: List[int]) -> torch.Tensor:
    """The float64 reference for sequences ``seqs`` of inputs ``a``, with lengths ``lens``
    (all of the inputs' sequences; ``a["seq_lens"]`` may differ, e.g. an empty one)."""
    return reference_for_args(a, seqs, lens)


class FakeCompiled:
    """Stands in for a compiled Triton kernel: ``compiled[grid](*args)`` records the
    launch, or raises as a launcher of another form would (``fail``)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.launches = fail, []

    def __getitem__(self, grid):
        def launch(*args):
            if self.fail:
                raise TypeError("launcher takes other arguments")
            self.launches.append((grid, args))

        return launch


class FakeJit:
    """Stands in for a @triton.jit kernel (``real``'s parameters): records plain
    launches and returns ``compiled`` as the handle."""

    def __init__(self, real, compiled: FakeCompiled) -> None:
        self.params = real.params
        self.compiled, self.launches = compiled, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, args, kwargs))
            return self.compiled

        return launch
