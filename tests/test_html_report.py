"""The report's index.html: what it holds, and how it renders in a real (headless) browser."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.report.html import markdown_html
from bench.report.write import write_report
from tests.test_report import results  # noqa: F401 (a fixture: finished and damaged runs)

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture
def report(results, tmp_path):  # noqa: F811
    out = tmp_path / "reports"
    write_report(results, out)
    return out


def test_the_page_shows_every_table_and_figure_and_links_every_run(report):
    page = (report / "index.html").read_text()
    pngs = sorted(p.name for p in report.glob("*.png"))
    assert pngs and sorted(re.findall(r'<img src="([^"]+)"', page)) == pngs
    rules = [ln for ln in (report / "digits.md").read_text().splitlines() if ln.startswith("|-")]
    assert page.count('<table class="sortable">') == len(rules) >= 1
    for run in ("n64s0", "n64s1", "n512", "t64", "base"):
        assert f'href="../results/{run}/"' in page
    assert "http://" not in page and "https://" not in page  # opens with no network


def test_a_page_written_away_from_its_runs_links_none_of_them(results, tmp_path):  # noqa: F811
    """A report written where its runs are not kept (reports/ from results elsewhere, then
    committed) names its runs without links, which would lead nowhere, and says why."""
    out = tmp_path / "committed" / "reports" / "digits"
    write_report(results, out)
    page = (out / "index.html").read_text()
    assert "n64s0" in page and "results/n64s0" not in page
    assert "not kept beside this page" in page
    hrefs = re.findall(r'href="([^"#]+)"', page)
    assert hrefs and all((out / h).exists() for h in hrefs), hrefs  # no link leads nowhere


def test_no_committed_page_links_to_nowhere():
    """The pages committed in reports/ link only what is committed beside them."""
    root = Path(__file__).resolve().parents[1] / "reports"
    pages = sorted(root.rglob("index.html"))
    assert pages
    for page in pages:
        hrefs = re.findall(r'href="([^"#]+)"', page.read_text())
        dead = [h for h in hrefs if not (page.parent / h).exists()]
        assert not dead, f"{page}: {len(dead)} dead links, e.g. {dead[:2]}"


def test_markdown_tables_become_html_tables_with_their_marks():
    text = "# T\n\nSetup: a; b.\n\n| loss | R@1 |\n|---|---|\n| nngk | **75.00 ± 1.00** ▼ |\n"
    got = markdown_html(text + "\n*intra*: a <mean>.\n")
    assert "<p><i>intra</i>: a &lt;mean&gt;.</p>" in got
    assert '<p class="setup">Setup: a; b.</p>' in got
    assert "<th>loss</th><th>R@1</th>" in got
    assert "<td>nngk</td><td><b>75.00 ± 1.00</b> ▼</td>" in got


def browser() -> str:
    found = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    if found is None:
        pytest.skip(
            "no Chromium on this machine: `apt-get install chromium` (Debian) runs the browser "
            "test; CI installs it"
        )
    return found


def render(page) -> tuple[str, str]:
    """The DOM after load, and what the browser logged, from headless Chromium."""
    args = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr"]
    args += ["--v=0", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return done.stdout, done.stderr


def console_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if ":CONSOLE" in line]


def test_the_page_loads_every_image_and_table_without_console_errors(report):
    dom, log = render(report / "index.html")
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert 'data-loaded="yes"' in body
    images = len(list(report.glob("*.png")))
    assert f'data-images="{images}"' in body and 'data-broken-images=""' in body
    assert 'data-tables="' in body and 'data-tables="0"' not in body
    assert console_lines(log) == [], console_lines(log)
    # The same check sees a broken image and a script error: it can fail.
    broken = report / "broken.html"
    page = (report / "index.html").read_text()
    broken.write_text(page.replace("</body>", '<img src="missing.png"><script>x.y</script></body>'))
    dom, log = render(broken)
    assert "missing.png" in re.search(r"data-broken-images=\"([^\"]*)\"", dom).group(1)
    assert console_lines(log)


def test_a_click_on_a_header_sorts_its_table(report):
    page = (report / "index.html").read_text()
    click = "<script>document.querySelector('table.sortable th:nth-child(3)').click();</script>"
    sorted_page = report / "sorted.html"
    sorted_page.write_text(page.replace("</body>", click + "</body>"))
    dom, _ = render(sorted_page)
    table = dom.split('<table class="sortable">')[1].split("</tbody>")[0].split("<tbody>")[1]
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table)]
    values = [float(re.match(r"[\d.]+", re.sub(r"<[^>]+>", "", row[2])).group()) for row in rows]
    assert len(values) >= 3 and values == sorted(values)
    assert 'class="asc"' in dom.split("</thead>")[0]
