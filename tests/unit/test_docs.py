"""The documentation: the site builds strictly, and the README stays a landing page.

``mkdocs build --strict`` turns every warning (a broken link, a page missing from the
navigation or a navigation entry without a page) into a failure. The store reference is
checked against the format registry in `tests/unit/test_store.py`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QUICK_START = (
    "bash scripts/dashboard.sh   # sets up .venv/app (requirements.txt only) and serves http://127.0.0.1:8501",
    "bash scripts/test.sh        # sets up .venv/dev (all requirements, Chromium) and runs every test",
)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": ""},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for page in ("index.html", "store/index.html", "views/head/index.html", "cli/index.html"):
        assert (tmp_path / "site" / page).is_file(), page


def test_the_readme_is_a_landing_page_with_the_two_quick_start_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    block = readme.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert block.strip().splitlines() == list(QUICK_START)


def test_every_view_has_a_page_and_a_screenshot() -> None:
    sys.path.insert(0, str(REPO))
    from headwatch.dashboard.navigation import PAGES

    for spec in PAGES:
        page = REPO / "docs" / "views" / f"{spec.url_path}.md"
        assert page.is_file(), page
        assert f"../images/{spec.url_path}.png" in page.read_text()
        assert (REPO / "docs" / "images" / f"{spec.url_path}.png").stat().st_size > 10_000


def test_the_readme_links_resolve_and_the_space_card_fits() -> None:
    readme = (REPO / "README.md").read_text()
    targets = re.findall(r"\]\(((?:docs/)[^)#]+)", readme)
    assert targets, "the README links into docs/"
    for target in targets:
        assert (REPO / target).is_file(), f"README links to {target}, which does not exist"
    card = readme.split("---")[1]
    found = re.search(r"^short_description: (.+)$", card, re.M)
    assert found is not None, "the Space card has no short_description"
    description = found.group(1)
    assert len(description) <= 60  # the Hub's limit for a Space card
