"""One way to print a table of results as GitHub markdown, LaTeX (booktabs) or CSV, shared by
``harness table`` and ``harness compare --format``.

A ``Grid`` is columns and rows of ``Cell``s. A score is printed on its metric's own scale (0-1:
three decimals, 0-100: one, an unbounded number by its size) with its 95% interval,
``0.412 [0.361, 0.465]``; a value that does not exist is ``n/a`` (never 0) and a column a row does
not have is blank. The best value of a column that asks for it is bold (markdown ``**``, LaTeX
``\\textbf``) among the rows of one group (``Grid.groups``: rows over the same questions), compared
as printed so that equal-looking numbers are all bold, and nowhere in a group whose values all
print the same. LaTeX puts a score's interval on a second line of its cell, prints the rows of
each value of ``Grid.section_column`` (a dataset) as a section with only the columns they have, and
scales the tabular down to the line width where it is wider (``\\resizebox``), never up. CSV keeps every
number unformatted, a score's interval in two more columns (``KEY.ci_low``, ``KEY.ci_high``), ``n/a``
for no value and an empty field for a column the row lacks (both read as missing by pandas).
"""

from __future__ import annotations

import csv
import io
import math
from typing import Literal

from pydantic import BaseModel

FORMATS = ("md", "latex", "csv")


class Column(BaseModel):
    key: str  # CSV header
    title: str  # markdown/LaTeX header
    kind: Literal["text", "count", "score", "p"] = "text"
    interval: bool = False  # a score with its 95% interval
    signed: bool = False  # a difference: +0.100
    best: Literal["high", "low"] | None = None  # bold the best value
    show: Literal["all", "csv", "print"] = "all"  # csv: machine-readable only; print: md/LaTeX only
    short: str | None = None  # the title in a LaTeX section where no other column of it reads the same


class Cell(BaseModel):
    value: float | int | str | None = None
    ci95: list[float] | None = None
    scale: float | None = 1.0  # the metric's perfect score: 1, 100, None (unbounded)
    absent: bool = False  # the row has no such column: blank, not n/a
    text: str | None = None  # printed instead of the value (``failed``); CSV keeps the value
    bold: bool = False


class Grid(BaseModel):
    columns: list[Column]
    rows: list[list[Cell]]
    notes: list[str] = []
    groups: list[str] | None = None  # per row: rows whose numbers compare (bold); None: all of them
    # LaTeX: the column whose value parts the rows into sections (``dataset``), each printed under
    # its own heading with only the columns its rows have; None: one block of every column
    section_column: str | None = None


def format_number(value: float | int, scale: float | None = 1.0, signed: bool = False) -> str:
    """A score on its own scale: 0-1 with three decimals, 0-100 with one; an unbounded number
    (tokens, cost, rounds) by its size; an integer as it is."""
    sign = "+" if signed else ""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:{sign}d}"
    if not math.isfinite(value):
        return str(value)
    if scale == 100:
        return f"{value:{sign}.1f}"
    if scale is None:
        size = abs(value)
        digits = 0 if size >= 1000 else 1 if size >= 100 else 2 if size >= 1 else 4
        return f"{value:{sign}.{digits}f}"
    return f"{value:{sign}.3f}"


def format_p(p: float) -> str:
    return f"{p:.3g}"


def _numeric(cell: Cell) -> bool:
    return not cell.absent and cell.text is None and isinstance(cell.value, (int, float))


def mark_best(grid: Grid) -> None:
    """Bold the best value of each column that has ``best`` among the rows of each group (ties, as
    printed, all bold), where at least two rows of the group have a value and not all print the
    same (a column of equal values has no best)."""
    groups = grid.groups if grid.groups is not None else [""] * len(grid.rows)
    if len(groups) != len(grid.rows):
        raise ValueError(f"{len(groups)} groups for {len(grid.rows)} rows")
    for j, column in enumerate(grid.columns):
        if column.best is None:
            continue
        by_group: dict[str, list[Cell]] = {}
        for row, group in zip(grid.rows, groups):
            if _numeric(row[j]):
                by_group.setdefault(group, []).append(row[j])
        for cells in by_group.values():
            shown = [float(format_number(c.value, c.scale)) for c in cells]
            if len(set(shown)) < 2:  # one value, or all alike: nothing is best
                continue
            best = max(shown) if column.best == "high" else min(shown)
            for cell, value in zip(cells, shown):
                cell.bold = value == best


def render(grid: Grid, fmt: str) -> str:
    """The grid as ``md``, ``latex`` or ``csv`` (notes under md and LaTeX; CSV is the data alone)."""
    if fmt == "md":
        return _markdown(grid)
    if fmt == "latex":
        return _latex(grid)
    if fmt == "csv":
        return _csv(grid)
    raise ValueError(f"unknown table format {fmt!r} (one of {', '.join(FORMATS)})")


# -- printed (markdown, LaTeX) -----------------------------------------------------------------
def _printed_columns(grid: Grid) -> list[int]:
    return [j for j, c in enumerate(grid.columns) if c.show != "csv"]


def _parts(cell: Cell, column: Column) -> tuple[str, str]:
    """(the value, the interval after it) as printed; the value is what bold applies to."""
    if cell.absent:
        return "", ""
    if cell.text is not None:
        return cell.text, ""
    if cell.value is None:
        return "n/a", ""
    if isinstance(cell.value, str):
        return cell.value, ""
    if column.kind == "p":
        return format_p(float(cell.value)), ""
    value = format_number(cell.value, cell.scale, column.signed)
    if not column.interval:
        return value, ""
    if not cell.ci95:
        return value, " [n/a]"
    lo, hi = (format_number(v, cell.scale) for v in cell.ci95)
    return value, f" [{lo}, {hi}]"


def _markdown_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _markdown(grid: Grid) -> str:
    cols = _printed_columns(grid)
    head = [_markdown_escape(grid.columns[j].title) for j in cols]
    rule = ["---" if grid.columns[j].kind == "text" else "---:" for j in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    for row in grid.rows:
        cells = []
        for j in cols:
            value, after = _parts(row[j], grid.columns[j])
            value, after = _markdown_escape(value), _markdown_escape(after)
            cells.append(f"**{value}**{after}" if row[j].bold else value + after)
        lines.append("| " + " | ".join(cells) + " |")
    if grid.notes:
        lines.append("")
        lines += [f"- {_markdown_escape(note)}" for note in grid.notes]
    return "\n".join(lines)


_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "±": r"$\pm$",
    "−": r"$-$",
    "Δ": r"$\Delta$",
    "—": "---",
    "–": "--",
}


def latex_escape(text: str) -> str:
    """Text as LaTeX prints it: its special characters escaped (``_`` -> ``\\_``)."""
    return "".join(_LATEX.get(ch, ch) for ch in text)


def _latex_number(text: str) -> str:
    return text.replace("-", "$-$") if text[:1] in "+-0123456789[" else latex_escape(text)


# The tabular at its own width, or the line's where it is wider (graphicx evaluates \width, the
# box's natural width, inside \resizebox's size): the only choice that fits whatever the columns.
# Compiled in an article (text 345 pt wide), a table of two HotpotQA runs was 514 pt wide, with a
# TopiOCQA run too 753 pt; intervals on a second line make them 455 and 694 pt, so the scale is 0.76
# and 0.50 rather than 0.67 and 0.46. tabularx cannot fit them: a model name or a dataset spec has
# no space to break at, and the score columns alone can be wider than the page. Runs of several
# datasets are printed as one section per dataset (``Grid.section_column``): its spec as the
# section's heading, not a column, and only the columns its runs have, so no column is blank for a
# dataset; HotpotQA and TopiOCQA runs are then 458 pt wide (0.75), as wide as HotpotQA's alone.
_LATEX_FIT = "\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{%"


def _latex_cell(cell: Cell, column: Column) -> str:
    value, after = _parts(cell, column)
    numeric = _numeric(cell) and column.kind != "text"
    value = _latex_number(value) if numeric else latex_escape(value)
    after = _latex_number(after.strip()) if after else ""
    text = f"\\textbf{{{value}}}" if cell.bold else value
    if after:  # the interval on a second line, braced so that \\ does not read it as [..]
        align = "l" if column.kind == "text" else "r"
        text = f"\\begin{{tabular}}[t]{{@{{}}{align}@{{}}}}{text}\\\\ {{{after}}}\\end{{tabular}}"
    return "{" + text + "}" if text.startswith("[") else text  # not read as \\[..]


def _latex_sections(grid: Grid) -> list[tuple[str | None, list[int | None], list[list[Cell]]]]:
    """(heading, the column printed at each position, the rows) of each section: one of every
    printed column without ``section_column``; else one per value of that column, in order of first
    row, with the columns that some row of it has (a column blank in all of them is another
    dataset's). A section with fewer columns leaves positions empty (None) after its last score, so
    that the columns after the scores (n, failed) line up under one another."""
    cols = _printed_columns(grid)
    keys = [c.key for c in grid.columns]
    if grid.section_column is None or grid.section_column not in keys:
        return [(None, list(cols), grid.rows)]
    at = keys.index(grid.section_column)
    by: dict[str, list[list[Cell]]] = {}
    for row in grid.rows:
        by.setdefault(str(row[at].value), []).append(row)
    shown = {name: [j for j in cols if j != at and any(not r[j].absent for r in rows)] for name, rows in by.items()}
    width = max(map(len, shown.values()))
    out: list[tuple[str | None, list[int | None], list[list[Cell]]]] = []
    for name, rows in by.items():
        own = shown[name]
        cut = max((i + 1 for i, j in enumerate(own) if grid.columns[j].kind == "score"), default=len(own))
        out.append((name, [*own[:cut], *[None] * (width - len(own)), *own[cut:]], rows))
    return out


def _section_titles(grid: Grid, cols: list[int | None]) -> list[str]:
    """The section's column titles: each column's ``short`` one where no other column of the
    section reads the same (``F1``, not ``F1 (topiocqa)``, where TopiOCQA has one F1)."""
    shorts = [None if j is None else grid.columns[j].short or grid.columns[j].title for j in cols]
    return ["" if j is None else s if shorts.count(s) == 1 else grid.columns[j].title for s, j in zip(shorts, cols)]


def _latex(grid: Grid) -> str:
    sections = _latex_sections(grid)
    width = len(sections[0][1])
    # a position is left-aligned where a section prints a text column there (the labels lead)
    spec = "".join(
        "l" if any(cols[i] is not None and grid.columns[cols[i]].kind == "text" for _, cols, _ in sections) else "r"
        for i in range(width)
    )
    lines = ["% \\usepackage{booktabs,graphicx}", _LATEX_FIT, f"\\begin{{tabular}}{{{spec}}}", "\\toprule"]
    for k, (heading, cols, rows) in enumerate(sections):
        if k:
            lines.append("\\midrule")
        if heading is not None:
            lines.append(f"\\multicolumn{{{width}}}{{@{{}}l}}{{\\textit{{{latex_escape(heading)}}}}} \\\\")
        titles = _section_titles(grid, cols) if heading is not None else [grid.columns[j].title for j in cols]
        lines += [" & ".join(map(latex_escape, titles)) + " \\\\", "\\midrule"]
        for row in rows:
            lines.append(" & ".join("" if j is None else _latex_cell(row[j], grid.columns[j]) for j in cols) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}}"]
    lines += [f"% {note}" for note in grid.notes]
    return "\n".join(lines)


# -- CSV -------------------------------------------------------------------------------------
def _csv_value(value: float | int | str | None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "n/a"
    return str(value)


def _csv(grid: Grid) -> str:
    cols = [j for j, c in enumerate(grid.columns) if c.show != "print"]
    head: list[str] = []
    for j in cols:
        column = grid.columns[j]
        head += [column.key, f"{column.key}.ci_low", f"{column.key}.ci_high"] if column.interval else [column.key]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(head)
    for row in grid.rows:
        fields: list[str] = []
        for j in cols:
            column, cell = grid.columns[j], row[j]
            value = "" if cell.absent else _csv_value(cell.value)
            fields.append(value)
            if column.interval:
                if cell.absent:
                    fields += ["", ""]
                elif cell.ci95 and cell.value is not None:
                    fields += [_csv_value(float(v)) for v in cell.ci95]
                else:
                    fields += ["n/a", "n/a"]
        writer.writerow(fields)
    return buffer.getvalue().rstrip("\n")
