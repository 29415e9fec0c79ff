"""How a stub's parameters reach the bundled kernel: by name, or by position.

A stub that names its parameters (``def paged_attention_v2(out, exp_sum, ...)``) is
forwarded by name, from its own signature: the kernel knows every spelling vLLM has
used.  A stub written as ``def paged_attention_v2(*args, **kwargs)`` names nothing, so
its arguments can only be passed on in the order vLLM's callers use (``paged_attn.py``
calls ``ops.paged_attention_v2(output, exp_sums, ...)`` positionally).  The bundled
entry point binds positional arguments in its canonical order, which is vLLM's from
0.5.3 on; before that, position 15 held one ``kv_scale`` for both caches where the
kernel expects ``k_scale, v_scale``.  The installed version therefore decides which
contract the positions follow, and the call repeats ``kv_scale`` for the older one.

Whatever cannot be mapped exactly is refused, with the reason: a named parameter at a
position where vLLM passes something else, keyword-only parameters beside ``*args``,
or ``*args`` on a tree whose version is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Mapping, Optional, Tuple

from packaging.version import Version

if TYPE_CHECKING:
    import libcst as cst
else:
    from ._lazy_cst import cst

#: vLLM split ``kv_scale`` into ``k_scale`` and ``v_scale`` in 0.5.3 (checked against the
#: 0.5.0 - 0.5.4 wheels: 0.5.2 has 21 parameters with ``kv_scale``, 0.5.3 has 22).
SPLIT_SCALES_SINCE = Version("0.5.3")
#: Position of ``kv_scale`` before 0.5.3 and of ``k_scale`` from 0.5.3 on.
SCALE_POSITION = 15


def splits_scales(version: Version) -> bool:
    """Whether ``version`` passes ``k_scale, v_scale`` (True) or one ``kv_scale``."""
    return Version(version.base_version) >= SPLIT_SCALES_SINCE


@dataclass(frozen=True)
class KernelSignature:
    """What the bundled entry point accepts (from the kernel package's signature.py)."""

    canonical: Tuple[str, ...]  # positional order of the entry point
    aliases: Mapping[str, str]  # older spelling -> canonical name

    @property
    def accepted(self) -> frozenset:
        return frozenset(self.canonical) | frozenset(self.aliases)

    def canonical_name(self, name: str) -> str:
        return self.aliases.get(name, name)

    def vllm_positions(self, version: Version) -> Tuple[str, ...]:
        """The names vLLM passes at each position, in canonical spelling."""
        if splits_scales(version):
            return self.canonical
        # one kv_scale where the kernel has k_scale, v_scale; the rest moves up by one
        return (
            *self.canonical[:SCALE_POSITION],
            "kv_scale",
            *self.canonical[SCALE_POSITION + 2 :],
        )


@dataclass(frozen=True)
class Forwarding:
    """The argument list of the kernel call, as source fragments, and how it was built."""

    arguments: Tuple[str, ...]
    how: str  # for the marker comment and the reason
    by_name: bool = False


class Unforwardable(ValueError):
    """The stub's signature cannot be mapped onto the kernel's; the message says why."""


def plan_forwarding(
    params: cst.Parameters, signature: KernelSignature, version: Optional[Version]
) -> Forwarding:
    """The call that passes everything the stub receives on to the kernel.

    Raises :class:`Unforwardable` when no call can do that exactly.
    """
    positional = [p.name.value for p in (*params.posonly_params, *params.params)]
    star = params.star_arg.name.value if isinstance(params.star_arg, cst.Param) else None
    kwonly = [p.name.value for p in params.kwonly_params]
    double_star = params.star_kwarg.name.value if params.star_kwarg is not None else None

    for name in (*positional, *kwonly):
        if name not in signature.accepted:
            raise Unforwardable(
                f"parameter {name!r} is not one the bundled kernel accepts "
                f"(it knows: {', '.join(sorted(signature.accepted))})"
            )
    tail = [f"**{double_star}"] if double_star else []
    if star is None and not params.posonly_params:
        return Forwarding(
            tuple([*(f"{n}={n}" for n in (*positional, *kwonly)), *tail]),
            "every parameter by name",
            by_name=True,
        )

    # Positional: the stub's positions are vLLM's positions, whatever it calls them.
    posonly = ", ".join(p.name.value for p in params.posonly_params)
    why = f"*{star}" if star is not None else f"positional-only parameters ({posonly})"
    if version is None:
        raise Unforwardable(
            f"it takes {why}, which carry vLLM's positional arguments, and the vLLM version "
            "is unknown, so which positional contract they follow (kv_scale before 0.5.3, "
            "k_scale and v_scale after) cannot be told"
        )
    if star is not None and kwonly:
        raise Unforwardable(
            f"keyword-only parameters after *{star} ({', '.join(kwonly)}): a positional "
            f"call fills their positions through *{star}, so forwarding both could pass "
            "one argument twice"
        )
    positions = signature.vllm_positions(version)
    if len(positional) > len(positions):
        raise Unforwardable(
            f"it takes {len(positional)} positional parameters; vLLM {version} passes at "
            f"most {len(positions)}"
        )
    for index, name in enumerate(positional):
        expected = positions[index]
        if signature.canonical_name(name) != signature.canonical_name(expected):
            raise Unforwardable(
                f"parameter {name!r} is at position {index}, where vLLM {version} passes "
                f"{expected!r}; forwarding it with {why} would hand the kernel the wrong "
                "argument"
            )

    legacy = not splits_scales(version)
    arguments: List[str] = list(positional)
    if legacy and len(positional) > SCALE_POSITION:
        arguments.insert(SCALE_POSITION + 1, positional[SCALE_POSITION])
    if star is not None:
        if legacy and len(positional) <= SCALE_POSITION:
            # the slice of *args that holds kv_scale, passed twice (k_scale, v_scale)
            end = SCALE_POSITION + 1 - len(positional)
            arguments += [f"*{star}[:{end}]", f"*{star}[{end - 1}:{end}]", f"*{star}[{end}:]"]
        else:
            arguments.append(f"*{star}")
    arguments += [f"{n}={n}" for n in kwonly]
    how = f"{why} forwarded in vLLM's positional order"
    if legacy:
        how += f" (vLLM {version} < {SPLIT_SCALES_SINCE}: kv_scale passed as k_scale and v_scale)"
    return Forwarding(tuple(arguments + tail), how)
