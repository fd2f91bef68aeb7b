"""What the figures share: each policy's fixed style.

Each policy has one fixed colour and line style in every figure (``policy_style``, from
``bdsgd.figures.POLICY_COLOURS`` and ``POLICY_DASHES``; bars: ``bar_style``).
"""

from __future__ import annotations

from bdsgd.figures import FALLBACK_COLOURS, POLICY_COLOURS, POLICY_DASHES, VARIANT_DASHES
from bdsgd.layout import explored, policy_parts


def policy_colour(policy: str) -> str:
    """The policy's fixed colour: explore-<p> and <p>+<variant> have p's; a name not in
    POLICY_COLOURS gets one of FALLBACK_COLOURS picked from its letters (the same name, the same
    colour, every run)."""
    base = policy_parts(explored(policy) or policy)[0]
    if base in POLICY_COLOURS:
        return POLICY_COLOURS[base]
    return FALLBACK_COLOURS[sum(map(ord, base)) % len(FALLBACK_COLOURS)]


def policy_style(policy: str) -> dict:
    """Line keywords of a policy: its colour and line style (``POLICY_DASHES``, else solid);
    explore-<p> is p's colour dash-dotted, <p>+<variant> p's colour in the variant's dash
    pattern (``VARIANT_DASHES``), styles no listed policy has."""
    if explored(policy) is not None:
        return {"color": policy_colour(policy), "ls": "-."}
    variant = policy_parts(policy)[1]
    if variant:
        return {"color": policy_colour(policy), "ls": VARIANT_DASHES.get(variant, (0, (3, 3)))}
    return {"color": policy_colour(policy), "ls": POLICY_DASHES.get(policy, "-")}


HATCHES = {"--": "//", ":": "..", "-.": "xx"}  # a bar's hatch, from its policy's line style
# ... and from a variant's (<p>+<variant>)
VARIANT_HATCHES = {"progress": "oo", "throughput": "**", "lr-linear": "||", "lr-sqrt": "--",
                   "lr-none": "\\\\"}


def bar_style(policy: str, alpha: float = 1.0) -> dict:
    """Bar keywords of a policy: its colour, hatched as its line is styled (dashed //, dotted
    .., explore-<p> xx, a variant ``VARIANT_HATCHES``), so that a family sharing a colour tells
    apart."""
    variant = policy_parts(policy)[1]
    hatch = VARIANT_HATCHES.get(variant, "++") if variant else HATCHES.get(policy_style(policy)["ls"])
    return {"color": policy_colour(policy), "alpha": alpha, "edgecolor": "white", "hatch": hatch}


MARKERS = {"-": "o", "--": "s", ":": "D", "-.": "X"}  # a dot's marker, from its line style


def marker(policy: str) -> str:
    """A policy's marker where it is a dot (its family, sharing a colour, told apart): from its
    line style; a variant's "P"."""
    ls = policy_style(policy)["ls"]
    return MARKERS[ls] if isinstance(ls, str) else "P"
