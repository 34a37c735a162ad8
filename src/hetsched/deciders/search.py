"""The ``rules`` decider's search: the mappings its own estimates (:mod:`hetsched.deciders.estimate`)
rank lowest, within a budget of estimates.

The search itself lives in :mod:`hetsched.model.descent` (below the deciders and the searches, so the
best-known reference's screened lane, ``hetsched.search.reference``, runs the same code on the exact model);
this module names it where the decider's code and its documentation look for it. See that module's docstring
for the search.
"""

from __future__ import annotations

from hetsched.model.descent import (
    EJECT_KICK_SHARE,
    EXCHANGE_FEW_IN_3W,
    EXCHANGE_IN,
    EXCHANGE_KICK_SHARE,
    EXCHANGE_KICK_SHARE_3W,
    EXCHANGE_OUT,
    LATE_QUEUE_RATIOS,
    Codes,
    Estimates,
    SearchResult,
    _kick,
    _race,
    _Search,
    focus,
    late_starts,
    local_search,
    resume,
)

__all__ = [
    "EJECT_KICK_SHARE",
    "EXCHANGE_FEW_IN_3W",
    "EXCHANGE_IN",
    "EXCHANGE_KICK_SHARE",
    "EXCHANGE_KICK_SHARE_3W",
    "EXCHANGE_OUT",
    "LATE_QUEUE_RATIOS",
    "Codes",
    "Estimates",
    "SearchResult",
    "_Search",
    "_kick",
    "_race",
    "focus",
    "late_starts",
    "local_search",
    "resume",
]
