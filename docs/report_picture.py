"""Regenerate the README's picture of the report's first screen from a pilot's ``report.html``.

    .venv/bin/python docs/report_picture.py runs/<stamp>/report.html   # writes docs/report-first-screen.png

Needs Debian's ``chromium`` (``make test`` installs it when run as root). The browser is closed
to the network (every host name resolves to nothing), as in ``tests/test_report_browser.py``:
the report is one offline file.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).with_name("report-first-screen.png")
WIDTH, HEIGHT = 1280, 800  # one laptop screen (issue 51: the decision fits it)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path, help="a pilot's report.html")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("needs Debian's chromium: apt-get install chromium", file=sys.stderr)
        return 2
    if not args.report.is_file():
        print(f"report: no such file {args.report} (a pilot writes it to --out)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            browser,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=127.0.0.1:9",
            f"--user-data-dir={profile}",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--screenshot={args.out.resolve()}",
            args.report.resolve().as_uri(),
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if not args.out.exists():
        print(res.stderr[-2000:], file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
