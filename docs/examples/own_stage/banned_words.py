"""A user's own stage for the Lenses pipeline, without a fork: drop every text containing a word.

Named in the run's config (config.yaml here) and found on PYTHONPATH:

    PYTHONPATH=docs/examples/own_stage lenses run --sample --config docs/examples/own_stage/config.yaml

It runs after `rules` (the config's `after`), reads the rules' texts and writes the texts without the
word; `validate` then reads this stage's texts. Each dropped text is a rejection with the reason
`banned_word`, in RUN/rejections/banned_words-part-NNNNN.parquet, the funnel and the dataset card.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from lenses_data.schemas import LensText, Rejection
from lenses_data.stages.base import ShardedStage

REASON = "banned_word"


class BannedWordStage(ShardedStage):
    """Reject every text containing the configured word (reason banned_word)."""

    class Settings(BaseModel):
        """The stage's own settings: `pipeline.extra_stages[].settings` in the config."""

        model_config = ConfigDict(extra="forbid")
        word: str = Field(min_length=1, description="A whole word, matched without regard to case")

    # What decides this stage's rows: its own settings (recorded by the settings guard, so a rerun
    # with another word stops with exit code 2 instead of mixing the two).
    output_settings = ("settings",)
    reads = ("text_id", "image_id", "text")  # checked on every input shard
    writes = tuple(LensText.model_fields)  # checked, exactly, before a shard is written
    model = LensText
    settings: Settings  # set by the pipeline from the config before the stage runs

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The rules' texts of one shard -> (texts without the word, one rejection per text with it)."""
        pattern = re.compile(rf"\b{re.escape(self.settings.word)}\b", re.IGNORECASE)
        hit = frame["text"].map(lambda text: bool(pattern.search(text)))
        message = f"contains the banned word {self.settings.word!r}"
        rejected = [
            Rejection(
                stage=self.name, record_id=row.text_id, reason=REASON, message=message, image_id=row.image_id
            ).model_dump()
            for row in frame[hit].itertuples()
        ]
        rejections = pd.DataFrame(rejected, columns=list(Rejection.model_fields))
        return frame[~hit].reset_index(drop=True), rejections
