"""member_mask agrees with pandas' isin on the dtypes the stages read (Arrow strings from Parquet,
objects), with sets and dicts, on empty frames and with ids missing from the set."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lenses_data.frames import member_mask

IDS = [f"img{i:05d}" for i in range(50)]


@pytest.mark.parametrize("dtype", ["string[pyarrow]", "object", "string[python]"])
@pytest.mark.parametrize("members", [set(IDS[::3]), {i: "train" for i in IDS[1::4]}, set(), {"elsewhere"}])
def test_the_mask_is_isins(dtype: str, members) -> None:
    values = pd.Series(IDS[::2] + ["unknown"], dtype=dtype)
    mask = member_mask(values, members)
    assert mask.dtype == np.bool_ and mask.tolist() == values.isin(list(members)).tolist()


def test_an_empty_shard_gives_an_empty_mask() -> None:
    mask = member_mask(pd.Series([], dtype="string[pyarrow]"), {"a"})
    assert mask.shape == (0,) and mask.dtype == np.bool_


def test_it_selects_rows_of_a_filtered_frame_by_position() -> None:
    frame = pd.DataFrame({"image_id": IDS[:6]}, index=[10, 3, 7, 1, 0, 4])
    assert frame[member_mask(frame["image_id"], {IDS[1], IDS[4]})]["image_id"].tolist() == [IDS[1], IDS[4]]
