"""The report as one HTML page. Every text from the data (captions, file names, messages, model
answers) goes through `esc`, so a caption holding `<script>` is shown as text, never run."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

from lenses_data.annotation.phrase_bank import default_phrase_bank
from lenses_data.publish.report.assets import CSS, JS
from lenses_data.schemas import LENS_NAMES, SPLIT_NAMES

RAW_CHARS = 600  # a model answer is cut to this many characters in a rejection example


def esc(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return html.escape(str(value), quote=True)


def marked(text: str) -> str:
    """The text escaped, with phrase-bank idioms (used as idioms) in <mark> titled by family."""
    parts, position = [], 0
    for match in default_phrase_bank().find(text):
        parts += [esc(text[position : match.start]), f'<mark title="{esc(match.family)}">']
        parts += [esc(text[match.start : match.end]), "</mark>"]
        position = match.end
    return "".join([*parts, esc(text[position:])])


def table_html(frame: pd.DataFrame) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float) and value.is_integer():
            return f"{int(value):,}"
        return f"{value:,}" if isinstance(value, int) else esc(value)

    head = "".join(f"<th>{esc(c)}</th>" for c in frame.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def image_tag(thumb: str | None, label: str) -> str:
    if not thumb:
        return '<div class="noimg">no image</div>'
    return f'<img src="{esc(thumb)}" alt="{esc(label)}" loading="lazy">'


def _listed(value: Any) -> list[str]:
    return [] if value is None or isinstance(value, float) else [str(v) for v in value]


def _text_html(row: dict[str, Any]) -> str:
    flags = "".join(f' <span class="flag">{esc(f)}</span>' for f in _listed(row.get("flags")))
    line = (
        f'<p class="text"><span class="kind">{esc(row["kind"])}</span> {marked(str(row["text"]))} '
        f'<span class="focus">Focus: {esc(row["focus"])}</span>{flags}</p>'
    )
    if row.get("edited") and row.get("original_text") != row["text"]:
        line += (
            f'<div class="edit">validation edit: before <del>{esc(row["original_text"])}</del> '
            f"after <ins>{esc(row['text'])}</ins></div>"
        )
    return line


def gallery_item(image: dict[str, Any], texts: list[dict[str, Any]], thumb: str | None) -> str:
    """One image: thumbnail, split, source, licence, then its texts (dict rows) grouped by lens."""
    lenses = [lens for lens in LENS_NAMES if any(str(t["lens"]) == lens for t in texts)]
    blocks = []
    for lens in lenses:
        rows = sorted((t for t in texts if str(t["lens"]) == lens), key=lambda t: (t["kind"], t["text_id"]))
        body = "".join(_text_html(r) for r in rows)
        blocks.append(f'<div class="lens-block" data-lens="{esc(lens)}"><h4>{esc(lens)}</h4>{body}</div>')
    meta = (
        f'<div class="meta"><span class="tag">{esc(image["split"])}</span><code>{esc(image["image_id"])}</code> '
        f"{esc(image.get('width'))}x{esc(image.get('height'))}<br>source: {esc(image.get('source'))}<br>"
        f"licence: {esc(image.get('licence') or 'unspecified')}</div>"
    )
    return (
        f'<article class="item" data-split="{esc(image["split"])}" data-lenses="{esc(" ".join(lenses))}">'
        f"{image_tag(thumb, str(image['image_id']))}{meta}{''.join(blocks)}</article>"
    )


def _example_html(row: dict[str, Any], text: dict[str, Any] | None, thumb: str | None) -> str:
    parts = [f'<div class="meta">record <code>{esc(row["record_id"])}</code>']
    if row.get("source") == row.get("source") and row.get("source"):
        parts.append(f"<br>source: {esc(row['source'])}")
    parts.append(f'</div><p class="message">{esc(row["message"])}</p>')
    if text is not None:
        parts.append(
            f'<p class="rejected-text" data-lens="{esc(text["lens"])}"><span class="kind">{esc(text["kind"])}</span> '
            f'<span class="tag">{esc(text["lens"])}</span> {marked(str(text["text"]))} '
            f'<span class="focus">Focus: {esc(text["focus"])}</span></p>'
        )
    raw = row.get("raw")
    if isinstance(raw, str) and raw:
        cut = raw if len(raw) <= RAW_CHARS else raw[:RAW_CHARS] + " ..."
        parts.append(f"<pre>{esc(cut)}</pre>")
    picture = image_tag(thumb, str(row.get("image_id") or "")) if thumb else ""
    return f'<div class="example">{picture}<div>{"".join(parts)}</div></div>'


def reason_html(
    count: dict[str, Any], examples: pd.DataFrame | None, texts: pd.DataFrame, thumbs: dict[str, str]
) -> str:
    """One stage and reason: its count (the card's numbers) and up to k examples."""
    rows = [] if examples is None else examples.to_dict("records")
    shown = []
    for row in rows:
        text = texts.loc[row["record_id"]].to_dict() if row["record_id"] in texts.index else None
        shown.append(_example_html(row, text, thumbs.get(row.get("image_id"))))
    title = (
        f"{esc(count['Stage'])} &middot; <code>{esc(count['Reason'])}</code>: {int(count['Rows']):,} rows, "
        f"{int(count['Records']):,} records"
    )
    return (
        f'<section class="reason" data-stage="{esc(count["Stage"])}" data-reason="{esc(count["Reason"])}">'
        f"<h3>{title}</h3>{''.join(shown)}</section>"
    )


def _select(name: str, label: str, values: list[str]) -> str:
    options = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
    return f'<label>{label} <select id="f-{name}"><option value="">all</option>{options}</select></label>'


def filters_html(reasons: list[str]) -> str:
    return (
        '<div class="filters">'
        + _select("lens", "Lens", list(LENS_NAMES))
        + _select("split", "Split", list(SPLIT_NAMES))
        + _select("reason", "Rejection reason", reasons)
        + '<button id="prev" type="button">&larr; previous</button><button id="next" type="button">next &rarr;</button>'
        + '<span id="shown"></span></div>'
    )


def page_html(title: str, banner: str | None, header: str, body: str) -> str:
    loud = f'<div class="banner" role="alert">{esc(banner)}</div>' if banner else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>{loud}"
        f"<header>{header}</header><main>{body}</main><script>{JS}</script></body></html>\n"
    )
