"""The documentation as HTML pages, with the walkthrough executed among them (``combine-lab docs``).

    built = build_pages("output/docs")   # runs notebooks/01_walkthrough headless, then renders
    built.walkthrough_html                # output/docs/walkthrough.html: code, tables, figures embedded
    built.walkthrough_md                  # output/docs/walkthrough.md, figures in walkthrough_files/
    built.pages                           # index.html (the README), contents.html (docs/README.md), ...

The walkthrough runs exactly as ``combine-lab notebooks --only walkthrough`` runs it (papermill, the
lab's kernel, answers revealed); nbconvert turns the executed copy into a page. The Markdown pages
of ``docs/`` and the repository's README are rendered with mistune: every heading gets the anchor
GitHub gives it (:func:`heading_anchor`), so a citation such as ``docs/protocol.md#5-kernel-protocol``
works on GitHub and in these pages alike, and links between pages point at the rendered pages.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LabError
from ..folders import usable_folder
from ..formats.files import write_atomic
from .notebooks import KERNEL_NAME, NotebookRun, find_notebooks, param_sets, run_notebooks

__all__ = ["REPO", "docs_dir", "heading_anchor", "page_anchors", "render_markdown", "source_pages",
           "render_walkthrough", "build_pages", "DocsBuild", "WALKTHROUGH"]

REPO = Path(__file__).resolve().parents[2]
#: The notebook the docs render, by the name ``combine-lab notebooks --only`` takes.
WALKTHROUGH = "walkthrough"

_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EXPLICIT = re.compile(r'<a\s+(?:id|name)="([^"]+)"')


def docs_dir() -> Path:
    """``<repository>/docs``: the Markdown pages."""
    return REPO / "docs"


def heading_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: inline code, links and emphasis reduced to their
    text, lower case, every character other than a letter, digit, space, ``-`` or ``_`` dropped,
    spaces to ``-``. ``"5. Kernel protocol"`` -> ``"5-kernel-protocol"``;
    ``"10. Ascend C vector path"`` -> ``"10-ascend-c-vector-path"``."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"(\*\*|\*)(.+?)\1", r"\2", text)
    text = re.sub(r"(?<!\w)(__|_)(.+?)\1(?!\w)", r"\2", text)  # intraword _ (all_to_all) is no emphasis
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def page_anchors(path: str | os.PathLike) -> list[str]:
    """The anchors of a Markdown page, in order: one per heading outside code fences (a repeated one
    gets ``-1``, ``-2``, ... as on GitHub), plus explicit ``<a id="...">`` anchors."""
    out: list[str] = []
    seen: dict[str, int] = {}
    fence = False
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fence = not fence
            continue
        if fence:
            continue
        m = _HEADING.match(line)
        if m:
            base = heading_anchor(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.append(base if n == 0 else f"{base}-{n}")
        out += _EXPLICIT.findall(line)
    return out


def source_pages() -> dict[Path, str]:
    """Markdown source -> the name of its rendered page: the README as ``index.html``,
    ``docs/README.md`` as ``contents.html``, every other ``docs/<name>.md`` as ``<name>.html``."""
    pages = {REPO / "README.md": "index.html", docs_dir() / "README.md": "contents.html"}
    for p in sorted(docs_dir().glob("*.md")):
        pages.setdefault(p, f"{p.stem}.html")
    return pages


def _link_target(url: str, source: Path, pages: dict[Path, str]) -> str:
    """``url`` as seen from the rendered page of ``source``: a link to a rendered Markdown page goes
    to its HTML page (anchor kept); anything else is left as written."""
    if re.match(r"^[a-z]+:", url) or url.startswith("#"):
        return url
    path, _, anchor = url.partition("#")
    target = (source.parent / path).resolve()
    if target in pages:
        return pages[target] + (f"#{anchor}" if anchor else "")
    return url


def render_markdown(text: str, source: str | os.PathLike | None = None, pages: dict[Path, str] | None = None) -> str:
    """HTML of one Markdown page (tables, fenced code): headings carry :func:`heading_anchor` ids
    (repeats numbered as on GitHub), and links to other pages of ``pages`` (default
    :func:`source_pages`) point at their rendered pages, relative to ``source``'s folder."""
    import mistune

    pages = source_pages() if pages is None else pages
    src = Path(source).resolve() if source is not None else docs_dir() / "README.md"
    seen: dict[str, int] = {}

    class Renderer(mistune.HTMLRenderer):
        def heading(self, text: str, level: int, **attrs) -> str:
            plain = re.sub(r"<[^>]+>", "", html.unescape(text))
            base = heading_anchor(plain)
            n = seen.get(base, 0)
            seen[base] = n + 1
            anchor = base if n == 0 else f"{base}-{n}"
            return f'<h{level} id="{anchor}">{text} <a class="anchor" href="#{anchor}">#</a></h{level}>\n'

        def link(self, text: str, url: str, title: str | None = None) -> str:
            return super().link(text, _link_target(url, src, pages), title)

    md = mistune.create_markdown(renderer=Renderer(escape=False), plugins=["table", "strikethrough"])
    return md(text)


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5 }
nav { border-bottom: 1px solid #ccc; padding-bottom: .5rem; margin-bottom: 1rem }
nav a { margin-right: 1rem }
code, pre { font-family: ui-monospace, monospace; font-size: 90% }
pre { background: #f6f8fa; padding: .75rem; overflow-x: auto }
table { border-collapse: collapse; margin: 1rem 0 } th, td { border: 1px solid #ccc; padding: .25rem .5rem }
a.anchor { color: #bbb; text-decoration: none; font-size: 80% }
"""


_NAV = ('<nav><a href="index.html">combine_lab</a><a href="contents.html">documentation</a>'
        '<a href="walkthrough.html">walkthrough</a></nav>')


def _page(title: str, body: str) -> str:
    nav = _NAV
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{nav}\n{body}</body></html>\n")


#: A docs citation in the walkthrough's text (``docs/protocol.md#5-kernel-protocol``), not inside an
#: attribute or a longer path.
_CITED = re.compile(r"(?<![\w/.\"'=:-])docs/([\w-]+)\.md(#[\w-]+)?(?![\w\"'])")


def _cited_link(m: re.Match) -> str:
    page = "contents" if m.group(1) == "README" else m.group(1)
    return f'<a href="{page}.html{m.group(2) or ""}">{m.group(0)}</a>'


def render_walkthrough(executed: str | os.PathLike, out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Turn an executed walkthrough notebook into ``out_dir/walkthrough.html`` (one self-contained
    page: code, every output, figures embedded; its docs citations link to the rendered pages) and ``out_dir/walkthrough.md`` (its figures as PNG
    files in ``out_dir/walkthrough_files/``). Returns both paths.

    Raises LabError when the notebook holds an error output (it did not run through)."""
    from .nb_imports import lean_jsonschema
    lean_jsonschema()
    import nbformat
    from nbconvert import HTMLExporter, MarkdownExporter

    out = Path(out_dir)
    book = nbformat.read(str(executed), as_version=4)
    for i, cell in enumerate(book.cells):
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if o.get("output_type") == "error":
                raise LabError(f"{executed}: cell {i} ended in {o.get('ename')}: {o.get('evalue')}",
                               parameter="executed", value=executed)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(book, resources={"metadata": {"name": "walkthrough"}})
    nav = _NAV.replace("<nav>", '<nav style="font-family: system-ui, sans-serif; padding: .5rem 1rem">')
    body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + nav, body, count=1)  # the way back to the docs
    body = _CITED.sub(_cited_link, body)
    html_path = out / "walkthrough.html"
    write_atomic(html_path, body)
    text, res = MarkdownExporter().from_notebook_node(book, resources={"output_files_dir": "walkthrough_files"})
    for name, data in res.get("outputs", {}).items():
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, data)
    md_path = out / "walkthrough.md"
    write_atomic(md_path, text)
    return html_path, md_path


@dataclass
class DocsBuild:
    """What :func:`build_pages` made: ``out`` (the folder), ``walkthrough`` (the notebook run),
    ``walkthrough_html`` and ``walkthrough_md`` (None when the walkthrough failed), ``pages`` (the
    rendered Markdown pages, in order)."""

    out: Path
    walkthrough: NotebookRun
    walkthrough_html: Path | None = None
    walkthrough_md: Path | None = None
    pages: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.walkthrough.ok and self.walkthrough_html is not None


def build_pages(out_dir: str | os.PathLike = "output/docs", params: dict | None = None,
                kernel_name: str = KERNEL_NAME, timeout_s: float = 600.0, log=None,
                out_name: str = "out_dir") -> DocsBuild:
    """Execute the walkthrough headless and render it, with every Markdown page of the docs, into
    ``out_dir`` (created): ``walkthrough.html``, ``walkthrough.md`` (+ ``walkthrough_files/``),
    ``index.html``, ``contents.html`` and one ``<page>.html`` per ``docs/<page>.md``; the executed
    notebook, its figures and record stay in ``out_dir/notebook/``.

    ``params``: a params mapping as ``combine-lab notebooks`` takes it (the walkthrough's entry or
    shared keys). A walkthrough that fails is reported in the result (``ok`` False, the error in
    ``walkthrough.error``) and no walkthrough page is written; the Markdown pages still are.

    Raises LabError for bad parameters (several parameter sets for the walkthrough among them: it
    makes one page) or a kernel that is not registered, ParameterError for an output folder that
    cannot hold files, all before anything runs.
    """
    if len(param_sets(params or {}, find_notebooks(only=[WALKTHROUGH]))) > 1:
        raise LabError(f"params: {WALKTHROUGH} is given several parameter sets; the docs build one walkthrough "
                       "page: give it one mapping", parameter="params", value=WALKTHROUGH)
    out = usable_folder(Path(out_dir), out_name).resolve()
    (run,) = run_notebooks(out / "notebook", params, only=[WALKTHROUGH], kernel_name=kernel_name,
                           timeout_s=timeout_s, log=log, out_name=out_name)
    built = DocsBuild(out, run)
    if run.ok:
        built.walkthrough_html, built.walkthrough_md = render_walkthrough(run.output, out)
    pages = source_pages()
    for src, name in pages.items():
        text = src.read_text(encoding="utf-8")
        title = next((m.group(2) for m in map(_HEADING.match, text.splitlines()) if m), name)
        target = out / name
        write_atomic(target, _page(title, render_markdown(text, src, pages)))
        built.pages.append(target)
    if log is not None:
        made = [p.name for p in built.pages] + ([built.walkthrough_html.name] if built.walkthrough_html else [])
        log(f"pages: {', '.join(made)}")
    return built
