"""Split-KV PagedAttention V2 kernels bundled by vllm-codemod.

Shipped twice: as ``vllm_codemod.kernels`` and, copied verbatim, as
``vllm._codemod_kernels`` in a patched vLLM tree.  Hence relative imports only, and
nothing heavy here: importing this package must not import torch or triton.
"""

from .signature import ACCEPTED_PARAMETERS, ALIASES, CANONICAL_PARAMETERS, PARTITION_SIZE

if __name__ == "vllm_codemod.kernels":
    from .. import __version__
else:  # the copy in a vLLM tree (vllm._codemod_kernels)
    __version__ = "0+unstamped"  # written by vllm_codemod.stamp when the tool copies the kernels

__all__ = [
    "ACCEPTED_PARAMETERS",
    "ALIASES",
    "CANONICAL_PARAMETERS",
    "PARTITION_SIZE",
    "__version__",
    "context_attention_fwd",
    "paged_attention_v2",
]


_impl = None
_prefill_impl = None


def paged_attention_v2(*args, **kwargs):
    """vLLM's ``ops.paged_attention_v2`` (any 0.4.3 - 0.11.0 spelling); writes ``out``.

    Thin wrapper: the implementation (torch, and Triton where usable) loads on first call.
    """
    global _impl
    if _impl is None:
        from .dispatch import paged_attention_v2 as impl

        _impl = impl
    return _impl(*args, **kwargs)


def context_attention_fwd(*args, **kwargs):
    """vLLM's prefix-prefill ``context_attention_fwd`` (any 0.4.3 - 0.11.0 spelling).

    Returns True once ``o`` is written, False when the call needs the tree's own kernel.
    Thin wrapper: the implementation loads on first call (see ``prefill.py``).
    """
    global _prefill_impl
    if _prefill_impl is None:
        from .prefill import context_attention_fwd as impl

        _prefill_impl = impl
    return _prefill_impl(*args, **kwargs)
