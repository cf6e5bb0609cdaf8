"""mkdocs hooks (mkdocs.yml: `hooks`): the figures the pages show are the committed ones in
reports/, outside docs/. The pages link them as `../reports/NAME`, which is right where the
markdown is read as it is (on GitHub, in an editor); for the site, each linked file is added
under reports/ and the links are pointed there."""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(\.\./(reports/[^)\s]+)\)")


def on_files(files, config):
    linked = set()
    for page in Path(config["docs_dir"]).glob("**/*.md"):
        linked.update(LINK.findall(page.read_text(encoding="utf-8")))
    for path in sorted(linked):
        if (ROOT / path).is_file():  # a missing one is left to mkdocs's link check
            files.append(File(path, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    return LINK.sub(r"](\1)", markdown)
