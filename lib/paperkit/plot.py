"""The book's one plot style, and small helpers that keep every figure alike."""
from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt

# Colour-blind-safe cycle (Okabe-Ito), in the order chapters should use for method, baseline, control, ...
COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]

STYLE = {
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "figure.figsize": (6.4, 3.6),
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 8.5,
    "legend.frameon": False,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.prop_cycle": matplotlib.cycler(color=COLORS),
    "lines.linewidth": 1.6,
}


def use_book_style() -> None:
    """Apply the book's style to matplotlib (call once, in a chapter's set-up cell)."""
    plt.rcParams.update(STYLE)


# The book's pages show figures at most 780 px wide; at the style's 110 dpi that is 7.1 inches. A figure drawn
# wider is shrunk by the browser and its tick labels with it, so panels() never draws wider than this.
MAX_WIDTH_IN = 7.1


def panels(ncols: int = 1, nrows: int = 1, width: float = 3.4, height: float = 3.0, **kw):
    """``fig, axes`` with panels of ``width`` x ``height`` inches; ``axes`` is always a flat list.

    When ``ncols * width`` exceeds :data:`MAX_WIDTH_IN` every panel is scaled down (width and height alike), so the
    figure is drawn at the width the page shows it and its text keeps the style's sizes.
    """
    shrink = min(1.0, MAX_WIDTH_IN / (width * ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols * shrink, height * nrows * shrink),
                             squeeze=False, constrained_layout=True, **kw)
    return fig, list(axes.ravel())


def table(header, rows):
    """An HTML table (IPython ``HTML``, class ``book-table``) of ``rows`` (each a sequence of ``len(header)`` cells,
    shown with ``str``, HTML-escaped) under ``header``. Markdown pipe tables in a cell's output do not render
    (myst-nb passes outputs through a renderer without tables), so a chapter's tables of results use this."""
    import html

    from IPython.display import HTML

    header = [str(h) for h in header]
    body = []
    for i, row in enumerate(rows):
        row = list(row)
        if len(row) != len(header):
            raise ValueError(f"table: row {i} has {len(row)} cells, the header has {len(header)}")
        body.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>")
    head = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
    return HTML(f'<table class="book-table"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>')
