"""A loopback web site and a GNU wget crawl of it into a WARC, for tests.

The site (Python's http.server) answers HTTP/1.1 with ``Transfer-Encoding: chunked`` and,
when asked (``Accept-Encoding: gzip``), ``Content-Encoding: gzip``: bodies as a real
server sends them. Its pages link to each other with relative, root-relative and
protocol-relative links. wget comes from ``scripts/wget.sh`` (Debian's package)."""

from __future__ import annotations

import gzip
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PAGES: dict[str, tuple[str, str]] = {
    "/index.html": (
        "The harbour office",
        "<p>Welcome to the harbour office. The pilot boats leave from the north quay at "
        "dawn, and the tide tables for the month are posted by the door every Monday.</p>"
        "<p>This week the office asks every skipper to read <a href='news/tides.html'>the "
        "notice on the spring tides</a> before mooring, to check <a href='/ships/list.html'>"
        "the list of ships in port</a> for free berths, and to keep <a "
        "href='//{host}/contact.html'>the office's telephone numbers</a> on board at all "
        "times, since the radio is often busy in the mornings.</p>",
    ),
    "/news/tides.html": (
        "Spring tides",
        "<p>The highest tides of the year arrive with the full moon in March and September. "
        "Boats moored on the south pier should be moved before the evening tide.</p>"
        "<p>The harbour master will post the exact times on <a href='../index.html'>the "
        "office's front page</a> two days ahead, and older warnings stay readable on <a "
        "href='?page=2'>the second page of notices</a> for anyone who missed them last year."
        "</p>",
    ),
    "/ships/list.html": (
        "Ships in port",
        "<p>Four cargo ships and two ferries are in port this week; the ferry to the "
        "islands sails twice a day when the weather allows it.</p>"
        "<p>Passengers who want to cross should look at <a href='./ferries.html#times'>the "
        "winter ferry times</a>, which change in November, and can always ask at <a "
        "href='/index.html'>the harbour office</a> on the north quay for the latest news.</p>",
    ),
    "/contact.html": (
        "Contact the harbour office",
        "<p>The harbour office is open from eight in the morning until six in the evening, "
        "every day but Sunday. Write to the harbour master for a berth.</p>"
        "<p>Letters take about three days to reach us, so skippers in a hurry should <a "
        "href='mailto:office@harbour.example'>send the office a message</a> instead, with "
        "the name of the boat, its length and the dates of the stay in the harbour.</p>",
    ),
}
GONE = "/old/notice.html"
IMAGE = "/logo.png"


def page_html(path: str, host: str) -> bytes:
    title, body = PAGES[path]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body><nav><a href='/'>Home</a> <a href='/ships/list.html'>Ships</a></nav>"
        f"<article><h1>{title}</h1>{body.replace('{host}', host)}</article>"
        "<footer>Harbour office, north quay</footer></body></html>"
    ).encode()


class _Site(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        host = self.headers.get("Host", "")
        if path in PAGES:
            status, content_type, body = 200, "text/html; charset=utf-8", page_html(path, host)
        elif path == IMAGE:
            status, content_type, body = 200, "image/png", b"\x89PNG\r\n\x1a\n" + b"\0" * 64
        else:
            status, content_type = 404, "text/html; charset=utf-8"
            body = b"<html><body><h1>Not found</h1></body></html>"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if "gzip" in self.headers.get("Accept-Encoding", ""):
            body = gzip.compress(body, mtime=0)  # the same bytes every time: revisits
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for start in range(0, len(body), 100):
            piece = body[start : start + 100]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")


@contextmanager
def site() -> Iterator[str]:
    """The site on a free loopback port, while the block runs: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def site_urls(base: str) -> list[str]:
    """Every URL of the site a crawl asks for: its pages, a page gone and an image."""
    return [base + path for path in (*PAGES, GONE, IMAGE)]


def wget() -> str:
    """The path of GNU wget (scripts/wget.sh installs Debian's package when missing)."""
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "wget.sh")], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"scripts/wget.sh failed:\n{result.stderr}")
    return result.stdout.strip().splitlines()[-1]


def wget_crawl(folder: Path, name: str, urls: list[str], *extra: str) -> Path:
    """Crawl ``urls`` with wget (``--warc-file``, gzip asked for); the WARC's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.txt").write_text("".join(url + "\n" for url in urls))
    subprocess.run(
        [
            wget(),
            "--quiet",
            "--tries=1",
            "--timeout=20",
            "--compression=gzip",
            f"--warc-file={name}",
            "--no-warc-keep-log",
            "-e",
            "robots=off",
            "-P",
            f"{name}-files",
            "-i",
            f"{name}.txt",
            *extra,
        ],
        cwd=folder,
        check=False,  # exit 8 for the page gone: the WARC is what counts
        timeout=120,
    )
    path = folder / f"{name}.warc.gz"
    if not path.exists():
        raise RuntimeError(f"wget wrote no {path.name}")
    return path
