"""Sphinx extension: say in one line what a build from the repository root renders.

`make book` (tools/build_site.py) builds from a staging folder holding the executed chapters and a marker file,
``.staged``. A reader who runs jupyter-book's usual ``jupyter-book build .`` at the root gets the same site from the
unexecuted notebooks (no figures, no claim tables); this tells them so instead of leaving them to wonder.
"""
from pathlib import Path


def _say(app, config):
    if not (Path(app.srcdir) / ".staged").exists():
        print("note: building from the unexecuted notebooks; `make book` executes every chapter first and renders "
              "the full site into _build/html")


def setup(app):
    app.connect("config-inited", _say)
    return {"parallel_read_safe": True}
