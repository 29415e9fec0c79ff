"""Which launch configs `tune` times beside the default: the balanced wave's residency."""

from __future__ import annotations

import types
from collections import namedtuple

from vllm_codemod.kernels import launch_tables as lt
from vllm_codemod.tuning import candidates
from vllm_codemod.tuning.shapes import Shape

SHAPE = Shape(32, 8, 128, "bfloat16")


def _impl(k3d: bool = True, config_type=lt.LaunchConfig, tables=lt):
    """The parts of a tree's decode_launch that the candidates read (no torch, no Triton);
    its tables hold ``config_type`` values, as a tree's own kernels would."""
    width = len(config_type._fields)

    def own(value):
        if isinstance(value, dict):
            return {k: config_type(*v[:width]) for k, v in value.items()}
        return config_type(*value[:width])

    names = [n for n in dir(lt) if n.endswith("CONFIGS") or n.endswith("_CONFIG")]
    return types.SimpleNamespace(
        LaunchConfig=config_type,
        launch_tables=tables,
        group_rows=lambda qpk: 16 if qpk <= 16 else 32,
        k3d_enabled=lambda: k3d,
        **{name: own(getattr(lt, name)) for name in names},
    )


def _slots(found):
    return [c[7] for c in found if len(c) > 7 and c[7]]


def test_the_default_is_also_timed_for_other_residencies():
    """The one-warp default balances at the H200's 8 programs per SM; the target device
    may hold fewer or more, so tune times half, three quarters and 1.5x that, right after
    the explicit chunks (before the cap can cut them)."""
    default = tuple(lt.K3D_MANY_PROGRAMS_CONFIG)
    found = candidates.v2_candidates(_impl(), default, SHAPE, 1)
    assert [c[6] for c in found[:3]] == [512, 256, 128]
    assert _slots(found[3:6]) == [4, 6, 12]
    assert all(c[:7] == default[:7] for c in found[3:6])
    assert len(found) <= candidates.MAX_CANDIDATES
    assert _slots(candidates.v2_candidates(_impl(), default, SHAPE, lt.STREAM_MAX_SEQS)) == [
        4,
        6,
        12,
    ]


def test_a_config_the_h200_never_balanced_gets_guesses_by_warps():
    """Triton 2.x's tables were never balanced on the H200 (no figure): 8 and 16
    programs per SM over the config's warps, so the target device can turn balancing on."""
    default = tuple(lt.MID_PROGRAMS_CONFIG)  # one warp
    assert _slots(candidates.v2_candidates(_impl(k3d=False), default, SHAPE, 1)) == [8, 16]
    two = tuple(lt.DEFAULT_CONFIGS[128])  # two warps
    assert _slots(candidates.v2_candidates(_impl(k3d=False), two, SHAPE, 1)) == [4, 8]


def test_no_residency_candidates_where_balancing_cannot_apply(monkeypatch):
    default = tuple(lt.K3D_MANY_PROGRAMS_CONFIG)
    assert _slots(candidates.v2_candidates(_impl(), default)) == []  # no shape given
    too_many = lt.STREAM_MAX_SEQS + 1
    assert _slots(candidates.v2_candidates(_impl(), default, SHAPE, too_many)) == []
    chunked = tuple(lt.K3D_MANY_PROGRAMS_CONFIG._replace(chunk=256))
    assert _slots(candidates.v2_candidates(_impl(), chunked, SHAPE, 1)) == []
    monkeypatch.setattr(lt, "BALANCED_WAVES", 0)
    assert _slots(candidates.v2_candidates(_impl(), default, SHAPE, 1)) == []


def test_a_tree_whose_kernels_predate_slots():
    """Kernels copied by an older vllm-codemod: their LaunchConfig has no slots field and
    their tables no balanced_slots; the candidates are the old ones, nothing fails."""

    fields = lt.LaunchConfig._fields[:7]
    Old = namedtuple(
        "Old", fields, defaults=[lt.LaunchConfig._field_defaults[f] for f in fields[3:]]
    )
    old = _impl(config_type=Old, tables=types.SimpleNamespace())
    found = candidates.v2_candidates(old, (32, 1, 1, True, 1, True), SHAPE, 1)
    assert found and all(len(c) == 7 for c in found)
