"""The kernels' logger: under vLLM's hierarchy inside a patched tree, so vLLM's logging
configuration routes and silences it; under the tool's own name elsewhere."""

from __future__ import annotations

import logging

_IN_TREE = __name__.startswith("vllm.")
log = logging.getLogger("vllm.codemod.kernels" if _IN_TREE else "vllm_codemod.kernels")
