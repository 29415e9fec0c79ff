"""``libcst``, imported on first use.

Importing libcst costs about 0.12 s of CPU, as much as a whole ``check`` whose verdicts
are all cached (docs/cli-performance.md).  The transform modules name it ``cst`` as
before, but bind this stand-in at import: the first attribute read (``cst.Module``,
``cst.parse_module``) imports libcst and keeps the attribute, so later reads cost
what a module attribute costs.  Nothing at a transform module's top level may read
an attribute, or the saving is gone (``tests/test_import_cost.py`` checks it).
"""

from __future__ import annotations

from typing import Any


class _Libcst:
    def __getattr__(self, name: str) -> Any:
        import libcst

        value = getattr(libcst, name)
        setattr(self, name, value)
        return value


cst: Any = _Libcst()
