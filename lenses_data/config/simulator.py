"""Settings of the built-in simulator: what it answers (modelled on the Lenses paper) and which
real-server faults it reproduces. Used by dry runs (`lenses run --sample`, `--simulate`) and by
`lenses simulate`.

Where each default comes from (001 = main paper, 000 = supplementary, in shared/seeds):

- Captions per image and lens mix: 001 Table 1, Total row (105,669 images, 732,405 captions;
  Literal 146,173, Figurative 171,875, Abstract 158,568, Background 119,686, Emotional 136,103),
  i.e. 6.93 captions per image. These are counts *after* validation, so the simulated generator
  over-produces by the share that the simulated rules and validators remove.
- Prompts per image: 001 Fig. 3 (right) is a histogram without numbers and Table 1 counts captions
  only; the simulator reuses the caption density and mix for image-side prompts (an assumption).
- Word counts: 001 gives no word statistics; the means and spread below are measured on the
  published examples (000 Figs. 5-6: 30 captions, 7-24 words, mean 15.2, sd 3.8; Fig. 7:
  29 prompts, 14-28 words, mean 19.1, sd 3.3), clipped to Listing 3's 8-22 words (captions) and
  Listing 2's 10-28 (prompts). 2 of those 59 texts fall outside their listing's range: that is
  `word_range_miss_rate`. The over-production above counts these as removed, as
  `annotate.word_limits: reject` does; under the default `flag` they are kept, so the final density
  is about 2/59 (3.4%) above Table 1's (inside tests/lenses_data/simulator/test_sim_mix.py's bound).
- Lenses left out of an answer: Listing 3 asks for at least one caption per category, yet 1 of
  the 60 lens slots of Figs. 5-7 is empty (one Fig. 7 image has no Abstract prompt).
- Bank idioms: Listings 2-3 require one in every Figurative text, but none of the 12 published
  Figurative examples (Figs. 5-7) contains a phrase-bank idiom; with 0 of 12 the rate is at most
  about 22% (95% bound), so the simulator puts one in 15% of Figurative texts and 5% of
  Emotional/Abstract texts (Listing 3: "MAY include"), never in Literal/Background.
- Validation: 001 Sec. 3.1 says failing items "are either revised or discarded" but gives no
  rates; the text-validation rates below are this project's assumptions. Visual validation (test
  split only) can have removed little: Table 1's test split keeps 6.96 captions per image against
  train's 6.93, so its discard rate is set to 1% (about the standard error of that density).
- Filter: 001 Sec. 3.1, "approximately 10% of candidates pass" (`FILTER_PASS_SHARE`,
  lenses_data/config/paper.py). The default `yes_rate` stays 0.3 and the sample config uses 0.85
  so a small pool leaves later stages work.
"""

from __future__ import annotations

from pydantic import Field

from lenses_data.config.frozen import FrozenModel
from lenses_data.config.paper import table1_density, table1_lens_share

# Mean words per text by kind and lens, measured on 000 Figs. 5-7 (six examples per lens).
EXAMPLE_WORDS: dict[str, dict[str, float]] = {
    "caption": {"Literal": 18.7, "Figurative": 14.8, "Abstract": 13.3, "Background": 15.0, "Emotional": 14.3},
    "prompt": {"Literal": 21.8, "Figurative": 17.2, "Abstract": 19.0, "Background": 18.5, "Emotional": 19.0},
}
EXAMPLE_WORDS_SD = {"caption": 3.8, "prompt": 3.3}


class SimContentSettings(FrozenModel):
    """How the simulated models write and validate texts (sources in the module docstring)."""

    texts_per_image: float = Field(
        table1_density(), gt=0, description="Final texts per image and kind to aim at (Table 1: 6.93)"
    )
    lens_share: dict[str, float] = Field(
        default_factory=table1_lens_share, description="Share of each lens (Table 1, Total row)"
    )
    lens_omit_rate: float = Field(1 / 60, ge=0, lt=1, description="Chance an answer leaves a lens out")
    word_range_miss_rate: float = Field(
        2 / 59, ge=0, le=1, description="Texts whose length falls just outside the listing's word range"
    )
    figurative_idiom_rate: float = Field(0.15, ge=0, le=1, description="Figurative texts with a bank idiom")
    optional_idiom_rate: float = Field(0.05, ge=0, le=1, description="Emotional/Abstract texts with one")
    text_discard_rate: float = Field(0.03, ge=0, le=1, description="Listing 4 discards (assumption)")
    text_edit_rate: float = Field(0.10, ge=0, le=1, description="Listing 4 light edits (assumption)")
    visual_discard_rate: float = Field(0.01, ge=0, le=1, description="Listing 5 discards (Table 1 bound)")
    visual_edit_rate: float = Field(0.05, ge=0, le=1, description="Listing 5 softening edits (assumption)")


class SimServerFaults(FrozenModel):
    """What some real OpenAI-compatible servers do to this pipeline's requests; all off by default."""

    reject_json_schema: bool = Field(
        False, description="HTTP 500 on any request whose response_format is json_schema"
    )
    ignore_choice: bool = Field(
        False, description="Ignore a structured choice (structured_outputs / guided_choice): free text"
    )
    reject_images: bool = Field(False, description="HTTP 500 on any request with an image part")
    garble_validator_focus: bool = Field(
        False,
        description="Listing 4 (text validation) answers rewrite every item's fixed Focus field, as a model "
        "seen on a real build did: validate discards every text (fixed_field_changed)",
    )
    truncate_json: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of JSON answers cut mid-document (finish_reason length) on every attempt, as a "
        "too-small max_tokens does",
    )


class SimulatorSettings(FrozenModel):
    """How the in-process simulator of a dry run answers; ignored by real runs."""

    yes_rate: float = Field(0.3, ge=0, le=1, description="Share of YES answers to the image filter")
    seed: int = Field(0, description="Seed of the simulator's deterministic answers")
    latency_s: float = Field(0.0, ge=0, description="Fixed delay before every simulated answer")
    replicas: int = Field(
        0, ge=0, description="Latency model: replicas, each serving one request at a time (0: unlimited)"
    )
    prefill_tps: float = Field(0.0, ge=0, description="Prompt tokens/s of one replica (0: no prefill time)")
    decode_tps: float = Field(0.0, ge=0, description="Completion tokens/s of one replica (0: no decode time)")
    content: SimContentSettings = Field(default_factory=SimContentSettings)
    server_faults: SimServerFaults = Field(default_factory=SimServerFaults)
