"""Hard literal negatives: the top-scored literal images, checked against a brute-force search."""

from __future__ import annotations

import numpy as np
import pytest

from training.baselines.lora_clip.mining import literal_pools, mine_hard_negatives
from training.external.irfl import DetectionTask


def _random_task(seed: int, n_rows: int = 12, n_images: int = 20) -> DetectionTask:
    rng = np.random.default_rng(seed)
    phrases = [f"p{rng.integers(0, 5)}" for _ in range(n_rows)]  # phrases repeat across rows
    cands, n_ans = [], []
    for _ in range(n_rows):
        k = int(rng.integers(1, 3))
        cands.append(rng.choice(n_images, size=k + int(rng.integers(1, 5)), replace=False))
        n_ans.append(k)
    return DetectionTask(
        phrases, ["idiom"] * n_rows, [f"{i}.jpeg" for i in range(n_images)], cands, np.array(n_ans)
    )


def _brute_force(task: DetectionTask, sim: np.ndarray, top_k: int, pool: str):
    out = []
    for row, phrase in enumerate(task.phrases):
        same = [r for r in range(len(task.phrases)) if pool == "all" or task.phrases[r] == phrase]
        literal = {
            int(i) for r in same for i in task.candidates[r][: len(task.candidates[r]) - task.n_answers[r]]
        }
        answers_of_phrase = {
            int(i)
            for r in range(len(task.phrases))
            if task.phrases[r] == phrase
            for i in task.candidates[r][len(task.candidates[r]) - task.n_answers[r] :]
        }
        ranked = sorted(literal - answers_of_phrase, key=lambda i: (-sim[row, i], i))[:top_k]
        for fig in task.candidates[row][len(task.candidates[row]) - task.n_answers[row] :]:
            out += [(row, int(fig), lit) for lit in ranked]
    return out


@pytest.mark.parametrize("pool", ["phrase", "all"])
@pytest.mark.parametrize("top_k", [1, 2, 5])
def test_mining_matches_brute_force(pool, top_k):
    for seed in range(4):
        task = _random_task(seed)
        sim = np.random.default_rng(100 + seed).normal(size=(len(task.phrases), len(task.image_paths)))
        sim = np.round(sim, 1)  # ties happen: the lower image index must come first
        t = mine_hard_negatives(task, sim, top_k=top_k, pool=pool)
        assert list(zip(t.row.tolist(), t.fig.tolist(), t.lit.tolist(), strict=True)) == _brute_force(
            task, sim, top_k, pool
        )
        assert np.allclose(t.lit_score, sim[t.row, t.lit])


def test_answers_never_become_negatives_and_pool_choice_matters():
    # image 1 is a distractor of phrase "a" in row 0 but its answer in row 1
    task = DetectionTask(
        ["a", "a", "b"],
        ["idiom"] * 3,
        [f"{i}" for i in range(6)],
        [np.array([1, 2, 0]), np.array([3, 1]), np.array([4, 5])],
        np.array([1, 1, 1]),
    )
    pools = literal_pools(task, "phrase")
    assert pools["a"].tolist() == [2, 3] and pools["b"].tolist() == [4]
    assert literal_pools(task, "all")["a"].tolist() == [2, 3, 4]
    sim = np.zeros((3, 6))
    sim[:2, 4] = 0.9  # phrase b's literal image is what the model likes most for phrase a
    sim[:2, 2], sim[:2, 3] = 0.1, 0.5
    assert mine_hard_negatives(task, sim, pool="phrase").lit.tolist() == [3, 3, 4]
    assert literal_pools(task, "all")["b"].tolist() == [1, 2, 3, 4]  # 1 is a's answer, also a distractor
    # row 2 scores every image 0: the tie goes to the lowest index of b's "all" pool
    assert mine_hard_negatives(task, sim, pool="all").lit.tolist() == [4, 4, 1]
    with pytest.raises(ValueError):
        mine_hard_negatives(task, sim[:2])
    with pytest.raises(ValueError):
        mine_hard_negatives(task, sim, top_k=0)
