"""A page per registered attention of the matrix (``families/NAME.html``): what it is, how to build
it, what it scores and how to reproduce each score.

The page shows the first paragraph of the variant's module docstring as its summary and the whole
docstring (the paper, its equations, where the zoo departs from the reference code) below; the
constructor's signature (its options); its capabilities (:func:`zoo.attention.capabilities`),
family and cost; its row of the matrix, and the rows of its entries with options that the matrix
runs (``{name: deltanet, negative_eigenvalues: true}`` on ``deltanet``'s page); its figures where records exist (accuracy against test
length, the needle heatmap); where a paper reports on the same task, its finding beside the zoo's
and how the protocols differ (:mod:`zoo.board.published`); and for each yardstick the ``python -m
zoo matrix`` command that runs that cell.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from zoo.attention import ATTENTION_REGISTRY, capabilities
from zoo.board.figures import length_figure, needle_figure
from zoo.board.matrix_cells import Matrix, MatrixRow
from zoo.board.matrix_page import (
    canonical_name,
    family_href,
    family_of,
    has_family_page,
    matrix_row_cells,
    save_figure,
)
from zoo.board.published import Finding, findings_for
from zoo.board.results import Result

__all__ = ["docstring", "family_lines", "signature", "write_family_pages"]


def docstring(name: str) -> str:
    """The docstring of the module that defines ``name``'s class (else the class's own)."""
    cls = ATTENTION_REGISTRY.get(name)
    module = sys.modules.get(cls.__module__)
    return inspect.cleandoc((module.__doc__ if module and module.__doc__ else cls.__doc__) or "")


def _parameter(parameter: inspect.Parameter) -> str:
    """``name: annotation = default`` as written in the source (annotations are strings there)."""
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}.get(parameter.kind, "")
    text = stars + parameter.name
    if parameter.annotation is not inspect.Parameter.empty:
        annotation = parameter.annotation
        text += f": {annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)}"
    if parameter.default is not inspect.Parameter.empty:
        text += f" = {parameter.default!r}"
    return text


def signature(name: str) -> str:
    """The constructor's parameters after ``self``, one a line, ``*`` before the keyword-only ones."""
    parameters = list(inspect.signature(ATTENTION_REGISTRY.get(name).__init__).parameters.values())[1:]
    lines = []
    for parameter in parameters:
        starred = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters)
        if parameter.kind == inspect.Parameter.KEYWORD_ONLY and not starred and "*" not in lines:
            lines.append("*")
        lines.append(_parameter(parameter))
    return ",\n".join(lines)


def family_lines(results: Sequence[Result], name: str) -> list[str]:
    """The board's rows a family page draws: ``name``, then the other rows of ``name`` alone (with
    options, ``deltanet(negative_eigenvalues=True)``, or by an alias), no stack."""
    own = {r.row for r in results if len(r.parts) == 1 and canonical_name(r.parts[0]) == name and r.row != name}
    return [name, *sorted(own)]


def _family_page(
    render: Callable[..., None],
    matrix: Matrix,
    row: MatrixRow,
    variants: list[MatrixRow],
    results: list[Result],
    findings: list[Finding],
    out: Path,
) -> list[str]:
    name = row.row.label
    cls = ATTENTION_REGISTRY.get(name)
    text = docstring(name)
    lines = family_lines(results, name)
    figures = []
    for kind, caption, figure in (
        ("length", "Accuracy against test length", length_figure(results, rows=lines)),
        ("needle", "Needle accuracy by test length and depth", needle_figure(results, rows=[name])),
    ):
        if figure is not None:
            figures.append({"src": "../" + save_figure(figure, out, f"family-{name}-{kind}"), "caption": caption})
    relative = family_href(name)
    page_dir = (out / relative).parent
    render(
        relative,
        "family.html.j2",
        title=name,
        plots=False,
        name=name,
        aliases=list(ATTENTION_REGISTRY.entry(name).aliases),
        summary=text.split("\n\n", 1)[0],
        docstring=text,
        signature=signature(name),
        capabilities=sorted(dataclasses.asdict(capabilities(cls)).items()),
        family=row.family,
        cost=getattr(cls, "cost", None) or "?",
        first=row.row.first,
        size=matrix.size,
        columns=[stick.title for stick in matrix.yardsticks],
        rows=[
            {"label": each.row.label, "cells": matrix_row_cells(matrix, each, page_dir), "parameters": each.parameters}
            for each in (row, *variants)
        ],
        figures=figures,
        findings=findings_for(findings, name),
    )
    return [figure["src"].removeprefix("../") for figure in figures]


def write_family_pages(
    render: Callable[..., None], matrix: Matrix, results: list[Result], findings: list[Finding], out: Path
) -> list[str]:
    """A page for every row of ``matrix`` that is one registered attention, with the rows of its
    entries with options beside its own (:func:`family_of`) and the ``findings`` that name it; the
    figures written."""
    written = []
    families = [family_of(row) for row in matrix.rows]
    for row, family in zip(matrix.rows, families):
        if has_family_page(row):
            variants = [other for other, of in zip(matrix.rows, families) if other is not row and of == family]
            written += _family_page(render, matrix, row, variants, results, findings, out)
    return written
