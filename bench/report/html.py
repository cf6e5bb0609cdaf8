"""index.html: the whole report on one static page that opens from disk, with no server and no
network: every table (sortable by a click on its header), every figure and gallery, and links
to the run folders. Built from the files the report writes (the markdown tables are this
report's own, so a small converter of their headings, paragraphs and pipe tables suffices)."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from bench.report.index import KINDS, pattern
from bench.report.table_format import Files

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1400px;
       padding: 0 1em 3em; }
nav { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ccc; padding: .5em 0; }
nav a { margin-right: 1em; }
h2 { border-bottom: 2px solid #333; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; white-space: nowrap; }
th { background: #f0f0f0; cursor: pointer; user-select: none; }
th:first-child, td:first-child { text-align: left; }
th.asc::after { content: " \\25B2"; } th.desc::after { content: " \\25BC"; }
figure { display: inline-block; margin: .5em 1em .5em 0; vertical-align: top; max-width: 100%; }
figure img { max-width: 100%; max-height: 600px; border: 1px solid #ddd; }
figcaption { font-size: 12px; color: #555; max-width: 640px; }
p.setup { color: #333; max-width: 1100px; }
.scroll { overflow-x: auto; }
"""

# Sorts a table by the number at the start of each cell of the clicked column (text otherwise),
# and records on <body> how many images loaded, for a person's eye and the browser test.
SCRIPT = """
function cellKey(td) {
  const text = td.textContent.trim();
  const num = parseFloat(text.replace(/^[^0-9.+-]*/, ''));
  return isNaN(num) ? text.toLowerCase() : num;
}
function sortBy(th) {
  const table = th.closest('table'), body = table.tBodies[0];
  const col = Array.from(th.parentNode.children).indexOf(th);
  const asc = !th.classList.contains('asc');
  table.querySelectorAll('th').forEach(h => h.classList.remove('asc', 'desc'));
  th.classList.add(asc ? 'asc' : 'desc');
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = cellKey(a.cells[col]), y = cellKey(b.cells[col]);
    const order = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0)
                                          : (typeof x === 'number' ? -1 : 1);
    return asc ? order : -order;
  });
  rows.forEach(r => body.appendChild(r));
}
document.querySelectorAll('table.sortable th')
  .forEach(th => th.addEventListener('click', () => sortBy(th)));
window.addEventListener('load', () => {
  const images = Array.from(document.images);
  const broken = images.filter(img => !(img.complete && img.naturalWidth > 0));
  document.body.dataset.images = images.length;
  document.body.dataset.brokenImages = broken.map(img => img.getAttribute('src')).join(' ');
  document.body.dataset.tables = document.querySelectorAll('table.sortable').length;
  document.body.dataset.loaded = 'yes';
});
"""


def url(path: str) -> str:
    """A relative link in an attribute: percent-encoded (a folder named 'a#1' or '50%' is a
    path, not a fragment or an escape), then HTML-escaped."""
    return html.escape(quote(path), quote=True)


def inline(text: str) -> str:
    """Markdown's inline marks of our tables (bold, italics, code, links) as HTML, the rest
    escaped."""
    text = html.escape(text)
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    text = re.sub(r"\*(.+?)\*", r"<i>\1</i>", text)
    text = re.sub(r"`(.+?)`", r"<code>\1</code>", text)
    link = r"\[(.+?)\]\((.+?)\)"
    return re.sub(link, lambda m: f'<a href="{url(html.unescape(m[2]))}">{m[1]}</a>', text)


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_html(lines: list[str]) -> str:
    """A markdown pipe table (header, rule, rows) as a sortable HTML table."""
    head = "".join(f"<th>{inline(c)}</th>" for c in cells(lines[0]))
    rows = [
        "<tr>" + "".join(f"<td>{inline(c)}</td>" for c in cells(r)) + "</tr>" for r in lines[2:]
    ]
    body = "\n".join(rows)
    return (
        f'<div class="scroll"><table class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>\n{body}\n</tbody></table></div>"
    )


def markdown_html(text: str) -> str:
    """Our markdown files (headings, paragraphs, pipe tables, bullet lists) as HTML."""
    out, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|") or (block and block[0].startswith("|") and line.strip()):
            block.append(line)
            continue
        if block:
            out.append(table_html(block))
            block = []
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + 2, 6)  # under the page's h2
            out.append(f"<h{level}>{inline(line.lstrip('#').strip())}</h{level}>")
        elif line.startswith("- "):
            out.append(f"<ul><li>{inline(line[2:])}</li></ul>")
        elif line.strip():
            css = ' class="setup"' if line.startswith("Setup:") else ""
            out.append(f"<p{css}>{inline(line)}</p>")
    return "\n".join(out)


def figure_html(name: str, caption: str) -> str:
    src = url(name)
    return (
        f'<figure><a href="{src}"><img src="{src}" alt="{html.escape(name)}" loading="eager"></a>'
        f"<figcaption>{html.escape(name)}: {html.escape(caption)}</figcaption></figure>"
    )


def group_html(group: str, files: Files) -> str:
    """One table's section: its markdown files, then its figures (galleries last), its CSVs."""
    parts = [f'<h2 id="{html.escape(group)}">{html.escape(group)}</h2>']
    # The main table first, galleries last.
    names = sorted(files, key=lambda n: (n != f"{group}.md", "-gallery-" in n, n))
    for name in names:
        if name.endswith(".md"):
            parts.append(markdown_html(files[name].decode()))
    for name in names:
        if name.endswith(".png"):
            parts.append(figure_html(name, KINDS.get(pattern(group, name), "")))
    csvs = [n for n in names if n.endswith(".csv")]
    if csvs:
        links = ", ".join(f'<a href="{url(n)}">{html.escape(n)}</a>' for n in csvs)
        parts.append(f"<p>As numbers: {links}.</p>")
    return "\n".join(parts)


def runs_html(runs: pd.DataFrame, out: Path) -> str:
    """The finished runs, each linked to its folder (a relative link: the page moves with the
    results beside it) where the folder lies beside the page; named alone, and said so, where
    it does not (a page committed without its runs would link nowhere)."""
    if not len(runs):
        return ""
    items = []
    for table, part in runs.sort_values(["table", "run"]).groupby("table", sort=False):
        links = [run_item(r, Path(p), out) for r, p in zip(part["run"], part["path"], strict=True)]
        items.append(
            f"<details><summary>{html.escape(str(table))}: {len(part)} runs</summary>"
            f"<ul>{''.join(links)}</ul></details>"
        )
    apart = not all(beside(Path(p), out) for p in runs["path"])
    note = f"<p>{RUNS_APART}</p>\n" if apart else ""
    return '<h2 id="runs">Runs</h2>\n' + note + "\n".join(items)


RUNS_APART = (
    "Runs without a link are not kept beside this page (it was written away from their "
    "folders, as a committed report is): their names say which runs made it."
)


def beside(run: Path, out: Path) -> bool:
    """Whether a run's folder lies under the page folder's parent, as results/report's runs
    lie in results/: a link to it leads somewhere wherever the two are moved together."""
    return Path(run).resolve().is_relative_to(Path(out).resolve().parent)


def run_item(name: str, run: Path, out: Path) -> str:
    if not beside(run, out):
        return f"<li>{html.escape(name)}</li>"
    return f'<li><a href="{url(os.path.relpath(run, out))}/">{html.escape(name)}</a></li>'


def index_html(results: Path, out: Path, groups: dict[str, Files], runs: pd.DataFrame) -> str:
    """The page: a menu of the tables, each table's section, and the runs."""
    shown = {g: f for g, f in groups.items() if f}
    menu = "".join(f'<a href="#{url(g)}">{html.escape(g)}</a>' for g in shown)
    sections = "\n".join(group_html(g, f) for g, f in shown.items())
    body = sections or "<p>No finished runs.</p>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>nngk-bench report</title>
<style>{STYLE}</style></head>
<body>
<nav><b>nngk-bench report</b> &nbsp; {menu}<a href="#runs">runs</a>
<a href="README.md">files</a></nav>
<p>Generated by <code>nngk-bench report</code> from <code>{html.escape(str(results))}</code>.
Click a column's header to sort by it; a figure opens full size on a click.</p>
{body}
{runs_html(runs, Path(out))}
<script>{SCRIPT}</script>
</body></html>
"""
