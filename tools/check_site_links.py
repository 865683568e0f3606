"""Check that every internal link of a built docs site resolves, the way a browser reading it
from disk (file://) would follow it.

    python tools/check_site_links.py SITE_DIR

Every ``href``/``src`` of every HTML page under SITE_DIR (bar 404.html, which only a server shows) that is not an external address
(``https:``, ``mailto:``, ...) must name a file in the site (a folder does not count: under
file:// it opens as a directory listing, not as its index.html), and a ``#fragment`` must be
an ``id`` (or ``name``) in the page it points to. Prints each broken link with the page it is
on, and exits 1 if there is any. Standard library only: ``tox -e docs`` runs it after
``mkdocs build``.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["broken_links", "main"]

_LINKING = {"a": "href", "link": "href", "area": "href", "img": "src", "script": "src", "source": "src",
            "iframe": "src"}


class _Page(HTMLParser):
    """The links and the anchors (ids and names) of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list = []
        self.anchors: set = set()

    def handle_starttag(self, tag, attrs) -> None:
        values = dict(attrs)
        for key in ("id", "name") if tag in ("a", "map") else ("id",):
            if values.get(key):
                self.anchors.add(values[key])
        attribute = _LINKING.get(tag)
        if attribute and values.get(attribute):
            self.links.append(values[attribute])


# A web server shows 404.html for any missing address, at any depth, so its links are absolute
# on purpose; nobody opens it from disk.
_SERVED_ONLY = {Path("404.html")}


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def _problem(site: Path, page_path: Path, link: str, pages: dict):
    """What is wrong with ``link`` on ``page_path``, or None when it resolves."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc:
        return None  # an external address (https:, mailto:, data:, ...): not this check's business
    if parts.path.startswith("/"):
        return "an absolute path: it points outside the site when opened from disk"
    target = (page_path.parent / unquote(parts.path)).resolve() if parts.path else page_path
    if not target.is_relative_to(site):
        return "points outside the site"
    if target.is_dir():
        return "a folder: from disk it opens as a directory listing, not its index.html"
    if not target.is_file():
        return "no such file in the site"
    if parts.fragment and target.suffix == ".html":
        if target not in pages:
            pages[target] = _parse(target)
        if unquote(parts.fragment) not in pages[target].anchors:
            return f"no id {parts.fragment!r} in {target.relative_to(site)}"
    return None


def broken_links(site) -> list:
    """(page, link, what is wrong) for each internal link of the site at ``site`` that does not resolve.

    Example:
        >>> broken_links("site")
        [('index.html', 'guide/', 'a folder: from disk it opens as a directory listing, not its index.html')]
    """
    site = Path(site).resolve()
    pages = {path: _parse(path) for path in sorted(site.rglob("*.html"))}
    found = []
    for path in [p for p in pages if p.relative_to(site) not in _SERVED_ONLY]:
        for link in pages[path].links:
            problem = _problem(site, path, link, pages)
            if problem:
                found.append((str(path.relative_to(site)), link, problem))
    return found


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python tools/check_site_links.py SITE_DIR (a built site: mkdocs build)", file=sys.stderr)
        return 2
    site = Path(args[0])
    found = broken_links(site)
    for page, link, problem in found:
        print(f"{page}: {link}: {problem}")
    pages = sum(1 for _ in site.rglob("*.html"))
    print(f"{len(found)} broken internal link(s) in {pages} pages of {site}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
