"""The two exceptions that hand a prefix-prefill call to the tree's own kernel.

They live apart from the router (``prefill``) and the launcher (``prefill_launch``)
because both raise or catch them and neither may import the other at module level:
the router must not import Triton before a CUDA call needs it.
"""

from __future__ import annotations


class Declined(Exception):
    """The call has something the bundled kernel does not support (the message says what)."""


class Triton2Refusal(ValueError):
    """A launch the kernel does not make under this box's Triton 2.x (fp8 caches, fp32 at
    head 256): the launcher raises it before any copy or launch, and the call goes to the
    tree's kernel, as for any ValueError of the launcher, but as a limit of the box."""
