"""``apply --tuning FILE``: which tuning table a plan ships, and what the manifest records.

The table is copied verbatim as ``vllm/_codemod_kernels/tuning.json`` (one more file the
paged-attention-v2 transform ships beside the kernels, so ``check`` shows it and
``revert`` removes it byte-exactly), and its prefix-prefill warps become the
``--num-warps`` of prefix-prefill-warps unless that is given explicitly.  The choice
persists: a later plain ``apply`` or ``check`` keeps the table already in the tree
(verified against the hash the manifest recorded); ``--no-tuning`` drops it.  Pure
Python: the rest of the tool never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..errors import ManifestError, UserError
from ..fsutil import sha256_bytes
from ..kernels import tuning_table
from ..transforms.paged_attention_v2 import KERNEL_DIR, TUNING_FILE, TUNING_TABLE_OPTION

#: the transform that ships the table (beside its kernels)
SHIPPED_BY = "paged-attention-v2"
#: the transform that takes the table's prefix-prefill warps
WARPS_BY = "prefix-prefill-warps"
#: the option through which the planner hands the table's bytes to that transform (never
#: persisted: the manifest records the hash), and the table's name in the kernel package
TABLE_OPTION = TUNING_TABLE_OPTION


@dataclass
class BakedTuning:
    """The table a plan ships.  ``data`` is None when the table is remembered but not in
    the tree: paged-attention-v2 did not apply there (an upstream tree with a real V2),
    so only its prefix-prefill warps took effect."""

    data: Optional[bytes]
    source: str
    devices: List[str]
    num_warps: Optional[int]
    digest: str = ""

    def __post_init__(self) -> None:
        if self.data is not None:
            self.digest = sha256_bytes(self.data)

    @property
    def sha256(self) -> str:
        return self.digest

    def record(self, shipped: bool) -> Dict[str, Any]:
        """What the manifest keeps under ``options.tuning``."""
        return {
            "sha256": self.sha256,
            "source": self.source,
            "devices": list(self.devices),
            "num_warps": self.num_warps,
            "shipped": shipped,
        }


def _parse(data: bytes, source: str) -> tuning_table.Table:
    try:
        return tuning_table.loads(data.decode("utf-8-sig"), source)
    except UnicodeDecodeError as exc:
        raise UserError(f"{source}: not UTF-8 (byte {exc.start}); pass a tuning file") from None
    except tuning_table.TuningFileError as exc:
        raise UserError(str(exc)) from None


def _num_warps(table: tuning_table.Table, source: str) -> Optional[int]:
    """The one prefix-prefill NUM_WARPS the file asks for (None: it measured none)."""
    chosen = {d.name: d.prefill_num_warps for d in table.devices if d.prefill_num_warps}
    if len(set(chosen.values())) > 1:
        listing = ", ".join(f"{name}: {w}" for name, w in sorted(chosen.items()))
        raise UserError(
            f"{source}: the devices in this file want different prefix-prefill warps "
            f"({listing}); pass --num-warps N to choose"
        )
    return next(iter(chosen.values()), None)


def load_given(path: Path) -> BakedTuning:
    """A tuning file named on the command line, validated (a bad one is exit 2)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"--tuning {path}: no such file; run `vllm-codemod tune` first") from None
    except IsADirectoryError:
        raise UserError(f"--tuning {path}: is a directory; pass the tuning JSON file") from None
    except OSError as exc:
        raise UserError(f"--tuning {path}: cannot read ({exc.strerror})") from None
    table = _parse(data, str(path))
    return BakedTuning(
        data, str(path), [d.name for d in table.devices], _num_warps(table, str(path))
    )


def choose(
    vllm_root: Path,
    given: Optional[Path],
    drop: bool,
    recorded: Optional[Dict[str, Any]],
) -> Optional[BakedTuning]:
    """The table this plan ships: the one given, else the one recorded, else none."""
    if given is not None and drop:
        raise UserError("--tuning and --no-tuning contradict each other; pass one")
    if drop:
        return None
    if given is not None:
        return load_given(given)
    if not recorded:
        return None
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sha256"), str):
        raise ManifestError(
            f"{vllm_root}/.vllm-codemod: the manifest's tuning record is malformed; pass "
            "--tuning FILE again or --no-tuning"
        )
    if recorded.get("shipped") is False:
        return BakedTuning(
            None, str(recorded.get("source")), list(recorded.get("devices") or []),
            recorded.get("num_warps"), recorded["sha256"],
        )  # fmt: skip
    path = vllm_root / KERNEL_DIR / TUNING_FILE
    try:
        data = path.read_bytes()
    except OSError:
        data = None
    if data is None or sha256_bytes(data) != recorded["sha256"]:
        raise UserError(
            f"{path}: the tuning table the last apply installed is missing or was changed; "
            "pass --tuning FILE to install one again, or --no-tuning to drop it"
        )
    table = _parse(data, str(path))
    return BakedTuning(
        data, str(recorded.get("source") or path), [d.name for d in table.devices],
        recorded.get("num_warps"),
    )  # fmt: skip
