#!/usr/bin/env python3
"""Screenshot each section of a report.html with headless Chromium (for the README).

    python scripts/report_screenshots.py results/report/report.html --out docs/img
    python scripts/report_screenshots.py report.html --samples-view 'run=r1&outcome=missed'
    python scripts/report_screenshots.py report.html --only section-summary --colors 64   # small, for a README

For every ``<section id="…">`` the script writes a copy of the page in which only that section is
shown (the others, the title and the contents list are hidden with one added style rule), opens
it in Chromium (``--screenshot``, ``--window-size``; ``--virtual-time-budget`` lets the sample
browser's script run) and saves ``<OUT>/<section id>.png``, cropped to the drawn content when
Pillow is installed. The sample browser is opened on ``#samples?<samples-view>``.

Chromium: ``--chromium PATH``, else ``$EVALPIPE_CHROMIUM``, else ``chromium``, ``chromium-browser``
or ``google-chrome`` on PATH (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SECTION = re.compile(r'<section\b[^>]*\bid="([^"]+)"')
NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium(explicit: str | None = None) -> str | None:
    """The Chromium executable: ``explicit``, ``$EVALPIPE_CHROMIUM``, or the first of NAMES on PATH."""
    for candidate in (explicit, os.environ.get("EVALPIPE_CHROMIUM")):
        if candidate:
            return shutil.which(candidate) or (candidate if Path(candidate).is_file() else None)
    return next((found for name in NAMES if (found := shutil.which(name))), None)


def chromium_args(chromium: str, profile: Path, budget_ms: int | None) -> list[str]:
    """Headless flags shared by every call; a throw-away profile so parallel runs never share one.

    ``budget_ms``: virtual time that page scripts (timers included) get before the capture; None
    for real clocks.
    """
    args = [chromium, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions",
            "--mute-audio", "--hide-scrollbars", f"--user-data-dir={profile}"]
    return args if budget_ms is None else [*args, f"--virtual-time-budget={budget_ms}"]


def section_ids(html: str) -> list[str]:
    """Ids of the page's ``<section>`` elements in document order (duplicates once)."""
    return list(dict.fromkeys(SECTION.findall(html)))


def isolate(html: str, section_id: str) -> str:
    """The page with only ``section_id`` visible (its enclosing sections stay, their other content hides)."""
    sid = section_id.replace("\\", "\\\\").replace('"', '\\"')
    rule = (f'<style>body > h1, body > nav {{ display: none !important; }} '
            f'section:not([id="{sid}"]):not(:has([id="{sid}"])) {{ display: none !important; }} '
            f'body {{ margin-top: 0 !important; padding-top: 1em; }}</style>')
    head_end = html.lower().find("</head>")
    return html[:head_end] + rule + html[head_end:] if head_end >= 0 else rule + html


def crop(png: Path, margin: int = 16, colors: int | None = None) -> None:
    """Cut the empty rows below and above the content and, with ``colors``, reduce the image to that
    many palette colours (a page of text and tables needs few; the file gets several times smaller).
    Needs Pillow; the image is left as is without it."""
    try:
        from PIL import Image, ImageChops
    except ImportError:
        return
    with Image.open(png) as image:
        rgb = image.convert("RGB")
    background = Image.new("RGB", rgb.size, rgb.getpixel((0, 0)))
    box = ImageChops.difference(rgb, background).getbbox()
    if box:
        rgb = rgb.crop((0, max(0, box[1] - margin), rgb.width, min(rgb.height, box[3] + margin)))
    if colors:
        rgb.quantize(colors=colors, method=Image.Quantize.MEDIANCUT).save(png, optimize=True)
    else:
        rgb.save(png)


def screenshot_sections(report: Path, out: Path, *, chromium: str, width: int = 1300, height: int = 1600,
                        samples_view: str = "", budget_ms: int = 10000, timeout_s: float = 120,
                        only: tuple[str, ...] = (), colors: int | None = None) -> list[Path]:
    """One PNG per section of ``report`` (or of the ``only`` ones) in ``out``; their paths in document order."""
    html = report.read_text(encoding="utf-8")
    ids = section_ids(html)
    if not ids:
        raise SystemExit(f"{report}: no <section id=…> found; is it an evalpipe report.html?")
    unknown = [s for s in only if s not in ids]
    if unknown:
        raise SystemExit(f"{report}: no section {', '.join(unknown)} (it has: {', '.join(ids)})")
    ids = [s for s in ids if not only or s in only]
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="report-shots-") as tmp:
        for section_id in ids:
            page = Path(tmp) / f"{re.sub(r'[^A-Za-z0-9_-]+', '-', section_id)}.html"
            page.write_text(isolate(html, section_id), encoding="utf-8")
            fragment = "#samples" + (f"?{samples_view.lstrip('?')}" if samples_view else "") \
                if section_id == "samples" else f"#{section_id}"
            target = out / f"{page.stem}.png"
            command = [*chromium_args(chromium, Path(tmp) / "profile", budget_ms), f"--window-size={width},{height}",
                       f"--screenshot={target}", page.resolve().as_uri() + fragment]
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
            if result.returncode != 0 or not target.is_file():
                tail = "\n".join(result.stderr.strip().splitlines()[-5:])
                raise SystemExit(f"chromium failed on section {section_id!r} (exit {result.returncode}):\n{tail}")
            crop(target, colors=colors)
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="a report.html written by `evalpipe report`")
    parser.add_argument("--out", type=Path, default=Path("screenshots"), help="folder for the PNGs (default: screenshots)")
    parser.add_argument("--width", type=int, default=1300)
    parser.add_argument("--height", type=int, default=1600, help="window height; a longer section is cut there")
    parser.add_argument("--samples-view", default="", help="fragment query for the sample browser, e.g. 'outcome=missed'")
    parser.add_argument("--chromium", help="path of the Chromium executable")
    parser.add_argument("--only", action="append", default=[], metavar="SECTION_ID",
                        help="only this section (repeatable), e.g. section-summary or samples")
    parser.add_argument("--colors", type=int, help="reduce each PNG to this many colours (smaller files)")
    args = parser.parse_args(argv)
    if not args.report.is_file():
        parser.error(f"{args.report}: no such file")
    chromium = find_chromium(args.chromium)
    if chromium is None:
        parser.error("Chromium not found: install it (Debian: apt-get install chromium) or pass --chromium PATH")
    for path in screenshot_sections(args.report, args.out, chromium=chromium, width=args.width, height=args.height,
                                    samples_view=args.samples_view, only=tuple(args.only), colors=args.colors):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
