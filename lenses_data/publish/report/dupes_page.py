"""The report's near-duplicate section: each chosen group's survivor beside its removed images, and
for each removed image the signal that merged it, its distance and the threshold it was judged by.
pHash, crop and CLIP removals are shown side by side, in the same groups when they share one."""

from __future__ import annotations

from typing import Any

from lenses_data.publish.report.dupes import LABEL, DupeView, is_near
from lenses_data.publish.report.page import esc, image_tag


def _known(value: Any) -> bool:
    return value is not None and value == value


def distance_text(signal: str, distance: float) -> str:
    """The removal's distance in its signal's unit: bits for the hashes, 1 - cosine for CLIP."""
    if signal == "clip":
        return f"{distance:.4f} (1 − cosine)"
    return f"{int(distance)} {'aligned bits' if signal == 'phash_crop' else 'bits'}"


def _threshold_text(signal: str, t: dict[str, Any]) -> str:
    key = {"phash": "hamming_radius", "both": "hamming_radius", "phash_crop": "crop_radius"}.get(signal)
    value = t.get("clip_threshold") if signal == "clip" else t.get(key) if key else None
    if not _known(value):
        return "threshold not recorded by this run"
    return f"threshold cosine ≥ {value}" if signal == "clip" else f"threshold ≤ {value} bits"


def evidence(member: dict[str, Any], t: dict[str, Any]) -> str:
    """Plain text: which signal merged this image, at what distance, against which threshold."""
    signal, distance, pair = member.get("signal"), member.get("distance"), member.get("pair") or {}
    if signal not in LABEL or not _known(distance):
        return "signal and distance not recorded"
    parts = [f"{LABEL[signal]}: distance {distance_text(signal, distance)}, {_threshold_text(signal, t)}"]
    if signal == "clip":
        parts.append(f"cosine {1.0 - float(distance):.4f}")
    if signal == "both" and _known(pair.get("cosine")):
        parts.append(f"CLIP cosine {float(pair['cosine']):.4f} (threshold ≥ {t.get('clip_threshold')})")
    if signal == "phash_crop":
        if _known(t.get("crop_confirm_radius")):
            parts.append(f"confirmed by dHash ≤ {t['crop_confirm_radius']} bits")
        if _known(pair.get("hamming")):
            parts.append(f"whole-image pHash {int(pair['hamming'])} bits")
    return "; ".join(parts)


def _figure(member: dict[str, Any], group_id: str, thumbs: dict[str, str], t: dict[str, Any]) -> str:
    image_id = member["image_id"]
    picture = image_tag(thumbs.get(image_id), image_id)
    if member["kept"]:
        return (
            f'<figure class="kept">{picture}<figcaption><b>kept</b> <code>{esc(image_id)}</code>'
            "<br>largest resolution, then lowest id</figcaption></figure>"
        )
    near = " near" if is_near(member) else ""
    via = (
        "" if member["linked_via"] == group_id else f"<br>linked via <code>{esc(member['linked_via'])}</code>"
    )
    flag = ' <span class="flag">near the threshold</span>' if near else ""
    return (
        f'<figure class="dropped{near}" data-signal="{esc(member.get("signal"))}" '
        f'data-distance="{esc(member.get("distance"))}">{picture}<figcaption><b>removed</b> '
        f'<code>{esc(image_id)}</code><br><span class="evidence">{esc(evidence(member, t))}</span>{flag}{via}'
        "</figcaption></figure>"
    )


def _pair_row(pair: dict[str, Any]) -> str:
    def number(value: Any, digits: int) -> str:
        return "-" if not _known(value) else f"{float(value):.{digits}f}"

    return (
        f"<tr><td><code>{esc(pair['image_a'])}</code> / <code>{esc(pair['image_b'])}</code></td>"
        f"<td>{esc(LABEL.get(pair['signal'], pair['signal']))}</td><td>{esc(pair['tier'])}</td>"
        f"<td>{number(pair['hamming'], 0)}</td><td>{number(pair.get('aligned'), 0)}</td>"
        f"<td>{number(pair['cosine'], 4)}</td></tr>"
    )


def group_html(group: dict[str, Any], thumbs: dict[str, str], t: dict[str, Any]) -> str:
    """One group: why it is shown, its images side by side (the kept one outlined), its pairs."""
    figures = "".join(_figure(m, group["group_id"], thumbs, t) for m in group["members"])
    rows = "".join(_pair_row(p) for p in group["pairs"])
    table = (
        "<table><thead><tr><th>pair</th><th>signal</th><th>tier</th><th>pHash Hamming (bits)</th>"
        f"<th>aligned crop (bits)</th><th>CLIP cosine</th></tr></thead><tbody>{rows}</tbody></table>"
    )
    return (
        f'<div class="group" data-group="{esc(group["group_id"])}"><h3>{esc(group["why"])} &middot; '
        f'{group["size"]} images</h3><div class="members">{figures}</div>{table}</div>'
    )


def _overview(view: DupeView) -> str:
    t = view.thresholds
    removed = ", ".join(f"{LABEL[s]} {n:,}" for s, n in view.removed_by_signal.items())
    clip = "" if t.get("clip_signal") in (None, "on") else f" (CLIP signal {t['clip_signal']} in this run)"
    crop = _threshold_text("phash_crop", t).removeprefix("threshold ")
    return (
        f'<p class="overview">{view.total:,} groups of two or more images; removed by signal: {esc(removed)}. '
        f"Thresholds: pHash {esc(_threshold_text('phash', t).removeprefix('threshold '))}; crop (aligned "
        f"centre-crop pHashes) {esc(crop)}, confirmed by dHash ≤ {esc(t.get('crop_confirm_radius'))}; CLIP "
        f"{esc(_threshold_text('clip', t).removeprefix('threshold '))}{esc(clip)}. Shown: "
        f"{len(view.groups):,} groups, taken in turn from the largest groups and, for each signal, the "
        "groups whose removal is nearest its threshold; each removed image names the signal that merged "
        "it, its distance and the threshold.</p>"
    )


def section_html(view: DupeView, thumbs: dict[str, str]) -> str:
    groups = "".join(group_html(g, thumbs, view.thresholds) for g in view.groups)
    return (
        '<section id="dedupe"><h2>Near-duplicate groups</h2>'
        + (_overview(view) + groups if view.total else "<p>No group of two or more images.</p>")
        + "</section>"
    )
