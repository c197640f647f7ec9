"""The report page's style and script, inlined into index.html: the page loads nothing else."""

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; background: #fafafa; }
header, main > section { padding: 0 1.2rem; }
h1 { margin: .6rem 0 .2rem; }
.banner { background: #b00020; color: #fff; font-size: 1.35rem; font-weight: 700; padding: 1rem 1.2rem;
  border-bottom: 6px solid #ffeb3b; }
.filters { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ddd; padding: .5rem 1.2rem;
  display: flex; gap: 1rem; align-items: center; flex-wrap: wrap; z-index: 1; }
nav a { margin-right: .8rem; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); gap: .8rem; }
.item, .group, .reason { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .6rem; }
.item img, figure img { max-width: 100%; max-height: 256px; display: block; margin: 0 auto; }
.noimg { height: 80px; display: flex; align-items: center; justify-content: center; background: #eee; color: #777; }
.meta { color: #555; font-size: 12px; margin: .3rem 0; word-break: break-all; }
.tag { display: inline-block; border-radius: 3px; padding: 0 .35rem; background: #e3eaf5; margin-right: .2rem; }
.lens-block h4 { margin: .5rem 0 .2rem; }
.text { margin: .15rem 0; }
.kind { font-size: 11px; color: #fff; background: #607d8b; border-radius: 3px; padding: 0 .3rem; }
.focus { color: #555; font-style: italic; }
.flag { font-size: 11px; background: #fff3cd; border-radius: 3px; padding: 0 .3rem; }
mark { background: #ffe082; border-radius: 2px; }
.edit { font-size: 12px; margin: .1rem 0 .3rem 1rem; }
del { color: #b00020; } ins { color: #1b5e20; text-decoration: none; }
.members { display: flex; gap: .6rem; flex-wrap: wrap; }
figure { margin: 0; max-width: 260px; }
figure.kept { outline: 3px solid #2e7d32; }
figure.dropped { outline: 1px dashed #999; }
figure.near { outline: 3px solid #ef6c00; }
.evidence { display: block; margin-top: .2rem; color: #333; word-break: normal; }
.overview { max-width: 70rem; }
figcaption { font-size: 12px; word-break: break-all; }
table { border-collapse: collapse; margin: .4rem 0 1rem; background: #fff; }
th, td { border: 1px solid #ccc; padding: .2rem .5rem; text-align: left; }
pre { white-space: pre-wrap; word-break: break-word; background: #f4f4f4; padding: .3rem; max-height: 10rem; overflow: auto; }
.example { display: flex; gap: .6rem; border-top: 1px solid #eee; padding: .4rem 0; }
.example img { width: 96px; height: auto; }
[hidden] { display: none !important; }
"""

# Filters: lens (gallery items and the texts shown, rejected texts), split (gallery), reason
# (rejection sections). Pages of PAGE items over the gallery items that match.
JS = """
(function () {
  var PAGE = 24, page = 0;
  var $ = function (id) { return document.getElementById(id); };
  var items = Array.prototype.slice.call(document.querySelectorAll('#gallery .item'));
  function each(selector, fn) { Array.prototype.forEach.call(document.querySelectorAll(selector), fn); }
  function apply() {
    var lens = $('f-lens').value, split = $('f-split').value, reason = $('f-reason').value;
    var matching = items.filter(function (el) {
      return (!split || el.dataset.split === split) &&
        (!lens || el.dataset.lenses.split(' ').indexOf(lens) >= 0);
    });
    var pages = Math.max(1, Math.ceil(matching.length / PAGE));
    page = Math.max(0, Math.min(page, pages - 1));
    items.forEach(function (el) { el.hidden = true; });
    matching.slice(page * PAGE, (page + 1) * PAGE).forEach(function (el) { el.hidden = false; });
    each('[data-lens]', function (el) { el.hidden = !!lens && el.dataset.lens !== lens; });
    each('.reason', function (el) { el.hidden = !!reason && el.dataset.reason !== reason; });
    $('shown').textContent = matching.length + ' of ' + items.length + ' images match; page ' +
      (page + 1) + ' of ' + pages;
    $('prev').disabled = page === 0;
    $('next').disabled = page >= pages - 1;
  }
  ['f-lens', 'f-split', 'f-reason'].forEach(function (id) {
    $(id).addEventListener('change', function () { page = 0; apply(); });
  });
  $('prev').addEventListener('click', function () { page -= 1; apply(); });
  $('next').addEventListener('click', function () { page += 1; apply(); });
  apply();
})();
"""
