"""Sphinx extension: let docstrings write |x| and ||x|| as in maths instead of as RST substitutions.

paperkit's docstrings use plain notation for absolute values and norms; reStructuredText reads ``|name|`` as a
substitution reference and fails the -W build. Escaping every bar before autodoc parses the docstring keeps the
plain notation readable in the source and in the rendered API page.
"""


def _escape(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        lines[i] = line.replace("|", "\\|")


def setup(app):
    app.connect("autodoc-process-docstring", _escape)
    return {"parallel_read_safe": True}
