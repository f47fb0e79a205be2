"""Headless Chromium for the docs site's tests, and what a reader would see on a page.

* :func:`chromium`: the binary, or a skip (a failure under ``CI=true``: ``.ci/run``
  installs Debian's ``chromium``);
* :func:`browse`: one headless run (``--dump-dom``, ``--screenshot``...);
* :func:`probe_pages`: each page opened as a reader would, with a small script
  added to a copy of it that reports, once the page has loaded, what the
  browser drew: the ``<math>`` elements it laid out as maths, the images it
  decoded, and any LaTeX left in the visible text;
* :data:`LAYOUT_PROBE`, :data:`SEARCH_PROBE`: other scripts for it: the layout at a
  window's width (overflow, sidebar, code columns), and the search box's hits;
* :func:`raw_latex` / :class:`PageText`: the same question asked of the HTML
  alone, without a browser.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1400,1000",
)

#: LaTeX as it would show if it was not rendered: ``$$``, a ``\command``, ``$x_i$``.
RAW_LATEX = re.compile(r"\$\$|\\[A-Za-z]+|\$[^\s$][^$]{0,300}?[^\s$\\]\$(?!\d)|\$[^\s$\d]\$")


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium not found, and CI=true: .ci/run should have installed it")
        pytest.skip("no chromium binary (apt-get install chromium); CI runs this test")
    return exe


def browse(exe: str, tmp: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """One headless Chromium run with its own profile folder under ``tmp``."""
    tmp.mkdir(parents=True, exist_ok=True)
    profile = Path(os.path.realpath(tmp)) / f"profile-{os.urandom(4).hex()}"
    cmd = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


# Runs after the page and its images have loaded; writes its findings as JSON into
# <body data-probe="...">, which --dump-dom then prints.
_PROBE = """<script>
window.addEventListener("load", () => {
  const maths = [...document.querySelectorAll("math")];
  const drawn = maths.filter((m) => {
    const box = m.getBoundingClientRect();
    return getComputedStyle(m).display.includes("math") && box.width > 0 && box.height > 0;
  });
  const images = [...document.querySelectorAll("img")];
  const visible = document.body.cloneNode(true);
  visible.querySelectorAll("math, code, pre, script, style").forEach((e) => e.remove());
  const raw = visible.textContent.match(new RegExp(%s, "g")) || [];
  document.body.dataset.probe = JSON.stringify({
    maths: maths.length,
    drawn: drawn.length,
    blocks: drawn.filter((m) => m.getAttribute("display") === "block").length,
    images: images.length,
    decoded: images.filter((i) => i.complete && i.naturalWidth > 0).length,
    raw: raw.slice(0, 5),
  });
});
</script>"""


# The layout at the window's width: how wide the document is, whether the sidebar shows,
# and how the first pair of code cells stands ("side by side", "stacked", or null).
LAYOUT_PROBE = """<script>
window.addEventListener("load", () => {
  const bar = document.querySelector("nav.sidebar");
  const cell = [...document.querySelectorAll(".col-numpy:not(.empty)")].find(
    (c) => c.nextElementSibling && c.nextElementSibling.matches(".col-torch:not(.empty)"));
  let columns = null;
  if (cell) {
    const [a, b] = [cell, cell.nextElementSibling].map((c) => c.getBoundingClientRect());
    columns = b.left >= a.right ? "side by side" : b.top >= a.bottom ? "stacked" : "overlap";
  }
  const wide = [...document.querySelectorAll("body *")].filter(
    (e) => e.getBoundingClientRect().right > innerWidth + 1);
  document.body.dataset.probe = JSON.stringify({
    width: innerWidth,
    scroll: document.documentElement.scrollWidth,
    sidebar: !!bar && getComputedStyle(bar).display !== "none" && bar.offsetWidth > 0,
    columns,
    wide: wide.slice(0, 5).map((e) => `${e.tagName}.${e.className}`),
  });
});
</script>"""

# Types a query (``%`` it in, as a JSON string) into the search box and reports the links
# of the hits, once MiniSearch and the index have loaded.
SEARCH_PROBE = """<script>
window.addEventListener("load", () => {
  const box = document.querySelector(".search input");
  box.focus();
  box.value = %s;
  box.dispatchEvent(new Event("input"));
  let tries = 0;
  const report = () => {
    const hits = [...document.querySelectorAll(".search ol a")].map((a) => a.getAttribute("href"));
    if (!hits.length && tries++ < 50) return setTimeout(report, 100);
    document.body.dataset.probe = JSON.stringify({ hits });
  };
  setTimeout(report, 100);
});
</script>"""


def probe_pages(
    exe: str,
    pages: list[Path],
    tmp: Path,
    parallel: int = 3,
    script: str | None = None,
    size: tuple[int, int] = (1400, 1000),
) -> dict[Path, dict]:
    """What Chromium drew on each page (see the module docstring; or what another
    ``script`` reports, :data:`LAYOUT_PROBE`), in a window of ``size``: page -> findings."""
    script = script or _PROBE % json.dumps(RAW_LATEX.pattern)

    def one(page: Path) -> tuple[Path, dict]:
        copy = page.with_name(f"_probe_{page.name}")  # beside it: its images resolve
        copy.write_text(
            page.read_text(encoding="utf-8").replace("</body>", script + "</body>"),
            encoding="utf-8",
        )
        window = f"--window-size={size[0]},{size[1]}"
        r = browse(exe, tmp, window, "--virtual-time-budget=10000", "--dump-dom", copy.as_uri())
        copy.unlink()
        m = re.search(r'data-probe="([^"]*)"', r.stdout)
        assert m, f"{page.name}: the probe did not run (exit {r.returncode}):\n{r.stderr[-1500:]}"
        return page, json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        return dict(pool.map(one, pages))


class PageText(HTMLParser):
    """A page's visible prose (outside math, code, pre, script, style), and its
    ``<math>`` and ``<img>`` elements, from the HTML alone."""

    SKIP = {"math", "code", "pre", "script", "style", "title"}
    VOID = {"img", "br", "meta", "link", "input", "hr", "mspace", "none", "mprescripts", "col"}

    def __init__(self, html_text: str):
        super().__init__()
        self.stack: list[str] = []
        self.parts: list[str] = []
        self.maths: list[dict] = []
        self.images: list[str] = []
        self.feed(html_text)
        self.text = "".join(self.parts)

    def handle_starttag(self, tag, attrs):
        if tag == "math":
            self.maths.append(dict(attrs))
        if tag == "img":
            self.images.append(dict(attrs).get("src", ""))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in self.stack:
            while self.stack and self.stack.pop() != tag:
                pass

    def handle_data(self, data):
        if not self.SKIP.intersection(self.stack):
            self.parts.append(data)


def raw_latex(text: str) -> list[str]:
    """The LaTeX fragments in ``text``, each with a little context."""
    return [text[max(0, m.start() - 30) : m.end() + 30] for m in RAW_LATEX.finditer(text)]
