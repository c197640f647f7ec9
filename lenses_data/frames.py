"""Small DataFrame helpers shared by the stages."""

from __future__ import annotations

from collections.abc import Collection, Hashable

import numpy as np
import pandas as pd


def member_mask(values: pd.Series, members: Collection[Hashable]) -> np.ndarray:
    """`values.isin(members)` as a boolean array, in time linear in `values` alone.

    pandas' `isin` on an Arrow string column first turns all of `members` into a list and an Arrow
    array: a shard's look-up in the pool's kept ids then costs the pool's size, not the shard's
    (0.85 s per 2,000-row shard against 93,832 ids, once per shard and again on every resume; the
    set look-up here takes under 1 ms). `members` must support fast `in` (a set or a dict)."""
    return np.fromiter((value in members for value in values.tolist()), dtype=bool, count=len(values))
