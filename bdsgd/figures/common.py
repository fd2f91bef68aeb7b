"""What the figures share: each policy's fixed style.

Each policy has one fixed colour and line style in every figure (``policy_style``, from
``bdsgd.figures.POLICY_COLOURS`` and ``POLICY_DASHES``; bars: ``bar_style``).
"""

from __future__ import annotations

from bdsgd.figures import EXPLORE_PREFIX, FALLBACK_COLOURS, POLICY_COLOURS, POLICY_DASHES


def policy_colour(policy: str) -> str:
    """The policy's fixed colour: explore-<p> has p's; a name not in POLICY_COLOURS gets one of
    FALLBACK_COLOURS picked from its letters (the same name, the same colour, every run)."""
    base = policy.removeprefix(EXPLORE_PREFIX)
    if base in POLICY_COLOURS:
        return POLICY_COLOURS[base]
    return FALLBACK_COLOURS[sum(map(ord, base)) % len(FALLBACK_COLOURS)]


def policy_style(policy: str) -> dict:
    """Line keywords of a policy: its colour and line style (``POLICY_DASHES``, else solid);
    explore-<p> is p's colour dash-dotted, a style no listed policy has."""
    if policy.startswith(EXPLORE_PREFIX):
        return {"color": policy_colour(policy), "ls": "-."}
    return {"color": policy_colour(policy), "ls": POLICY_DASHES.get(policy, "-")}


HATCHES = {"--": "//", ":": "..", "-.": "xx"}  # a bar's hatch, from its policy's line style


def bar_style(policy: str, alpha: float = 1.0) -> dict:
    """Bar keywords of a policy: its colour, hatched as its line is styled (dashed //, dotted
    .., explore-<p> xx), so that a family sharing a colour tells apart."""
    return {"color": policy_colour(policy), "alpha": alpha, "edgecolor": "white",
            "hatch": HATCHES.get(policy_style(policy)["ls"])}
