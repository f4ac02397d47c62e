"""A campaign's HTML report opened in a real headless Chromium: what the browser parsed and laid out.

:func:`view` runs the distro's Chromium twice on the ``file://`` page: once on the page as it is
(``--dump-dom``: the DOM the browser built under the page's own Content-Security-Policy), once on
a copy that carries a probe script (allowed by its sha256 in that copy's policy, nothing else
changed) which measures, after layout, the boxes of the heat map, of each bar chart and its bars,
and the text a reader sees in the failed and outlier lists; the probe writes its figures into the
DOM, which ``--dump-dom`` prints. :func:`problems` says what a report is missing.

Invariants: the browser runs with a private, throwaway profile (``--user-data-dir``: two runs at
once never share a process), and ``--no-sandbox`` only when this process is root (Chromium refuses
to start as root with its sandbox on); the page under test is never modified (the probe goes into
a copy). Flags and behaviour: :data:`SOURCES`.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuforge.spec.citation import Citation

SOURCES: dict[str, Citation] = {
    "headless-cli": Citation(
        "Chrome Headless command-line reference (developer.chrome.com/docs/automation-and-testing/headless-cli)",
        "https://developer.chrome.com/docs/automation-and-testing/headless-cli",
        "'The following command-line flags are available in Headless mode and in Headless shell'; '--dump-dom "
        "prints the serialized DOM of the target page to stdout ... Chrome first parses the HTML code into a DOM, "
        "executes any <script> that might alter the DOM, then turns that DOM back into a serialized string'; "
        "'--screenshot ... with the --window-size flag'; '--timeout ... maximum wait time (in milliseconds) after "
        "which the page's content is captured by --dump-dom, --screenshot'",
    ),
    "headless-mode": Citation(
        "Chrome Headless mode (developer.chrome.com/articles/new-headless)",
        "https://developer.chrome.com/articles/new-headless",
        "'pass the --headless command-line flag'; 'Since Chrome 132.0.6793.0 the old Headless mode is only "
        "available as a standalone binary named chrome-headless-shell'",
    ),
    "no-sandbox-as-root": Citation(
        "chromium/chromium content/browser/zygote_host/zygote_host_impl_linux.cc, ZygoteHostImpl::Init",
        "https://chromium.googlesource.com/chromium/src/+/main/content/browser/zygote_host/zygote_host_impl_linux.cc",
        "'if (command_line.HasSwitch(sandbox::policy::switches::kNoSandbox)) return;' then 'Exit early if running "
        "as root without --no-sandbox. See https://crbug.com/638180 ... Running as root with the sandbox is not "
        "supported': LOG(ERROR) 'Running as root without --no-sandbox is not supported.' and exit(EXIT_FAILURE). "
        "Seen here (Debian 12 chromium 156.0.8078.108-1~deb12u1, root): that message and exit 1 without the flag, "
        "the page's DOM with it",
    ),
    "user-data-dir": Citation(
        "chromium(1) manual page (chromium/src chrome/app/resources/manpage.1.in; man.archlinux.org/man/chromium.1)",
        "https://man.archlinux.org/man/chromium.1.en",
        '\'--user-data-dir=DIR Specifies the directory that user data (your "profile") is kept in. Defaults to '
        "$HOME/.config/chromium. Separate instances of Chromium must use separate user data directories; repeated "
        "invocations of chromium will reuse an existing process for a given user data directory'",
    ),
    "debian-chromium": Citation(
        "Debian 12 (bookworm, bookworm-security) package index: chromium and chromium-headless-shell "
        "156.0.8078.108-1~deb12u1 (apt-cache show)",
        "https://packages.debian.org/bookworm/chromium",
        "chromium: /usr/bin/chromium, 'web browser'; chromium-headless-shell: 'web browser - old headless shell' "
        "(/usr/bin/chromium-headless-shell); both from source package chromium, section web",
    ),
    "csp-hash": Citation(
        "MDN, CSP source values (developer.mozilla.org/en-US/docs/Web/HTTP/Headers/Content-Security-Policy/Sources)",
        "https://developer.mozilla.org/en-US/docs/Web/HTTP/Headers/Content-Security-Policy/Sources",
        "'<hash-source> A sha256, sha384 or sha512 hash of scripts or styles ... two portions separated by a dash: "
        "the encryption algorithm used to create the hash and the base64-encoded hash of the script'; script-src "
        "falls back to default-src when absent (MDN, CSP: script-src)",
    ),
}

#: Browsers tried in order (Debian: ``chromium``, ``chromium-headless-shell``).
BINARIES = ("chromium", "chromium-headless-shell", "chromium-browser", "google-chrome")
#: What setup installs (scripts/setup.sh), named in a skip's reason.
PACKAGE = "chromium"

#: Runs after the page's own content (end of body): measures what layout made of the report and
#: writes it as JSON into <pre id="gf-probe">.
PROBE_JS = (
    "(function(){var box=function(e){var r=e.getBoundingClientRect();return [Math.round(r.width),"
    "Math.round(r.height)];};var one=function(s){var e=document.querySelector(s);return e?{box:box(e),"
    "text:e.innerText||''}:null;};var out={heatmap:null,bars:[],failed:one('#failed'),"
    "outliers:one('#outliers'),summary:one('#summary')};var h=document.querySelector('svg#heatmap');"
    "if(h){var cells=h.querySelectorAll('rect.cell'),drawn=0,classes={};cells.forEach(function(c){var b=box(c);"
    "if(b[0]>0&&b[1]>0)drawn++;var k=c.getAttribute('class').split(' ')[1]||'';classes[k]=(classes[k]||0)+1;});"
    "out.heatmap={box:box(h),cells:cells.length,drawn:drawn,classes:classes};}"
    "document.querySelectorAll('svg.bars').forEach(function(s){var bars=s.querySelectorAll('rect.bar'),drawn=0,"
    "flagged=[];bars.forEach(function(b){var x=box(b),v=b.querySelector('title');"
    "if(x[0]>0&&(x[1]>0||(v&&/: 0$/.test(v.textContent))))drawn++;"
    "if(b.classList.contains('outlier')){var t=b.querySelector('title');flagged.push(t?t.textContent:'');}});"
    "out.bars.push({metric:s.getAttribute('data-metric'),box:box(s),bars:bars.length,drawn:drawn,"
    "median:!!s.querySelector('line.median'),band:!!s.querySelector('rect.band'),outliers:flagged});});"
    "var p=document.createElement('pre');p.id='gf-probe';p.textContent=JSON.stringify(out);"
    "document.body.appendChild(p);})();"
)
_PROBE_OUT = re.compile(r'<pre id="gf-probe">(.*?)</pre>', re.S)


class BrowserError(RuntimeError):
    """Chromium did not produce the page (the message has its exit status and the end of its stderr)."""


@dataclass
class PageView:
    """What the browser made of a report."""

    browser: str
    dom: str
    """The page as it is, serialized after parsing (``--dump-dom``)."""
    layout: dict[str, Any] = field(default_factory=dict)
    """The probe's figures: heat map and bar boxes, bars drawn, the failed/outlier lists' visible text."""


def find_browser() -> str | None:
    """The first of :data:`BINARIES` on PATH (None: no Chromium here)."""
    return next((path for b in BINARIES if (path := shutil.which(b))), None)


def browser_argv(binary: str, url: str, profile: Path, *, root: bool | None = None) -> list[str]:
    """Headless Chromium printing ``url``'s DOM; ``--no-sandbox`` as root only (SOURCES['no-sandbox-as-root'])."""
    as_root = os.geteuid() == 0 if root is None else root
    argv = [binary, "--headless", f"--user-data-dir={profile}", "--window-size=1400,1000", "--timeout=20000"]
    if as_root:
        argv.append("--no-sandbox")
    return [*argv, "--dump-dom", url]


def _dump(binary: str, page: Path, timeout: float) -> str:
    with tempfile.TemporaryDirectory(prefix="gf-chromium-") as profile:
        argv = browser_argv(binary, page.resolve().as_uri(), Path(profile))
        try:
            cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BrowserError(f"{binary} did not finish within {timeout:.0f} s") from None
    if cp.returncode != 0 or "<html" not in cp.stdout:
        tail = " | ".join(cp.stderr.strip().splitlines()[-3:])
        raise BrowserError(f"{' '.join(argv)}: exit {cp.returncode}: {tail or 'no DOM printed'}")
    return cp.stdout


def probed_copy(page_text: str) -> str:
    """The page with :data:`PROBE_JS` before ``</body>`` and its hash (only) allowed as a script."""
    digest = base64.b64encode(hashlib.sha256(PROBE_JS.encode()).digest()).decode()
    text = page_text.replace("default-src 'none';", f"default-src 'none'; script-src 'sha256-{digest}';", 1)
    return text.replace("</body>", f"<script>{PROBE_JS}</script></body>", 1)


def view(page: Path, binary: str | None = None, timeout: float = 120) -> PageView:
    """Open ``page`` (a report file) headless: its DOM, and the probe's layout figures (BrowserError)."""
    binary = binary or find_browser()
    if binary is None:
        raise BrowserError(f"no Chromium here (tried {', '.join(BINARIES)}; apt-get install {PACKAGE})")
    dom = _dump(binary, page, timeout)
    with tempfile.TemporaryDirectory(prefix="gf-probe-") as tmp:
        copy = Path(tmp) / page.name
        copy.write_text(probed_copy(page.read_text(encoding="utf-8")), encoding="utf-8")
        probed = _dump(binary, copy, timeout)
    found = _PROBE_OUT.search(probed)
    if found is None:
        raise BrowserError(f"{binary}: the layout probe did not run (its script was refused or failed)")
    return PageView(binary, dom, json.loads(html.unescape(found[1])))


def problems(v: PageView, failed: list[str], outliers: list[str]) -> list[str]:
    """What the report lacks in the browser: the plots drawn (heat map cells, every chart's bars, its
    median line and band), ``failed`` named in the failed list and ``outliers`` in the outlier list
    and as flagged bars. Empty: the page is right."""
    out = []
    for marker in ('id="summary"', 'id="failed"', 'id="outliers"', 'id="heatmap"', 'class="bars"'):
        if marker not in v.dom:
            out.append(f"the DOM has no {marker}")
    heat = v.layout.get("heatmap") or {}
    if not heat or min(heat["box"]) <= 0 or heat["drawn"] == 0 or heat["drawn"] != heat["cells"]:
        out.append(f"the heat map is not drawn: {heat}")
    charts = v.layout.get("bars", [])
    if not charts:
        out.append("no bar chart was laid out")
    for c in charts:
        if min(c["box"]) <= 0 or c["drawn"] != c["bars"] or not c["bars"] or not (c["median"] and c["band"]):
            out.append(f"chart {c['metric']}: not fully drawn ({c})")
    seen = {"failed": (v.layout.get("failed") or {}).get("text", ""),
            "outliers": (v.layout.get("outliers") or {}).get("text", "")}  # fmt: skip
    flagged = " ".join(t for c in charts for t in c["outliers"])
    for node in failed:
        if f"{node}:" not in seen["failed"]:
            out.append(f"{node} is not named in the failed list a reader sees: {seen['failed'][:300]!r}")
    for node in outliers:
        if f"{node}: outlier:" not in seen["outliers"]:
            out.append(f"{node} is not named in the outlier list a reader sees: {seen['outliers'][:300]!r}")
        if f"{node}:" not in flagged:
            out.append(f"{node} has no flagged bar in any chart")
    return out
