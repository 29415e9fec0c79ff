"""Relaunch a Triton kernel through its compiled handle once Triton has launched it.

Why: ``kernel[grid](...)`` binds and specializes every argument on every call, tens of
microseconds of host time for kernels with this many parameters (docs/kernel-notes.md,
v41: 69.4 us per decode call with plain launches, 26.3 us with the compiled handle).
Triton >= 3 returns the compiled kernel from a launch, and ``compiled[grid](*args)``
takes every parameter, constexprs included, without looking at them again.  So a
caller keys a :class:`Relauncher` on everything Triton specializes on (shapes, strides,
integer values, dtypes, each pointer's 16-byte alignment: :func:`misaligned`) and only
the first call of a key pays for the binding.  If a launcher ever refuses its arguments
(a Triton whose handle takes another form), the owning module's switch
(:func:`fast_state`) turns the fast path off, and that module's launches go through
Triton again for the rest of the process.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import triton

from .log import log

TRITON_MAJOR = int(getattr(triton, "__version__", "0").split(".")[0])


def fast_state() -> Dict[str, bool]:
    """A fresh on/off switch for one module's relaunchers (on where Triton >= 3)."""
    return {"enabled": TRITON_MAJOR >= 3}


def misaligned(*tensors: Optional[Any]) -> Tuple[int, ...]:
    """Each tensor's data pointer modulo 16 (0 for None): a plan key's alignment part.

    Triton specializes each pointer argument on its 16-byte alignment, and a relaunched
    kernel is never looked at again, so every pointer a kernel takes needs its own entry:
    an OR of all the pointers cannot tell which one moved.  vLLM's mixed batches pass
    ``seq_lens`` and ``block_tables`` sliced past the prefills
    (``seq_lens_tensor[num_prefills:]``), 4 bytes apart per prefill, and a kernel
    compiled for an aligned ``seq_lens`` may read several lengths in one vector load,
    which faults at a misaligned address.
    """
    return tuple([0 if t is None else t.data_ptr() & 15 for t in tensors])


class Relauncher:
    """One kernel of one launch shape: its grid, constexprs and options, and the
    compiled handle once Triton has launched it the normal way.

    ``fast`` is the owning module's switch (:func:`fast_state`), read at every launch so
    that turning it off (a failure here, or a benchmark's plain-launch rows) takes effect
    at once."""

    __slots__ = ("fn", "grid", "constexprs", "const_values", "options", "compiled", "fast")

    def __init__(
        self,
        fn: Any,
        grid: Tuple[int, ...],
        constexprs: Dict[str, Any],
        options: Dict[str, Any],
        fast: Dict[str, bool],
    ) -> None:
        self.fn = fn
        self.grid = grid
        self.constexprs = constexprs
        # The launcher takes them after the runtime parameters (every kernel here puts
        # its constexprs last), in the kernel's order, whatever order the dict has
        # (Triton 3's parameter list; elsewhere the dict's order).
        params = getattr(fn, "params", None) or ()
        names = [p.name for p in params if getattr(p, "is_constexpr", False)]
        if sorted(names) != sorted(constexprs):
            names = list(constexprs)
        self.const_values = tuple(constexprs[name] for name in names)
        self.options = options
        self.compiled: Any = None
        self.fast = fast

    def launch(self, args: Tuple[Any, ...]) -> None:
        """``args``: the kernel's runtime parameters, in order."""
        compiled = self.compiled
        if compiled is not None and self.fast["enabled"]:
            try:
                compiled[self.grid](*args, *self.const_values)
                return
            except Exception as exc:  # a launcher of another shape: plain launches from now
                self.fast["enabled"] = False
                log.info("vllm-codemod: Triton's compiled-kernel launcher is unusable (%s)", exc)
        handle = self.fn[self.grid](*args, **self.constexprs, **self.options)
        if hasattr(handle, "__getitem__"):
            self.compiled = handle


__all__ = ["Relauncher", "TRITON_MAJOR", "fast_state", "misaligned"]
