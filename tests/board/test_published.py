"""The published findings beside the matrix's families (``configs/matrix/published.yaml``): each
entry names registered rows and a results page's heading, shows on those rows' family pages, and a
malformed entry is refused in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.board.matrix_records import matrix_site  # noqa: F401 (a fixture)
from zoo.attention import ATTENTION_REGISTRY
from zoo.board.published import code_spans, findings_for, read_findings
from zoo.errors import ConfigurationError
from zoo.matrix.cli import PROTOCOLS

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = read_findings(PROTOCOLS)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_anchor(line.lstrip("#")) for line in page.read_text(encoding="utf-8").splitlines() if line[:2] == "##"}


def test_the_anchor_is_githubs() -> None:
    assert (
        _anchor(" MQAR (256, 16) at width 64: the layers of issue 68")
        == "mqar-256-16-at-width-64-the-layers-of-issue-68"
    )
    assert _anchor("MAD's recall, `gla`") == "mads-recall-gla"


@pytest.mark.parametrize("finding", FINDINGS, ids=[f"{f.rows[0]}-{f.task[:24]}" for f in FINDINGS])
def test_each_finding_names_registered_rows_and_a_results_heading(finding) -> None:
    assert all(ATTENTION_REGISTRY.get(name) for name in finding.rows)
    page = ROOT / finding.page
    assert page.is_file(), finding.see
    assert finding.anchor in _anchors(page), f"{finding.see}: no such heading"


def test_the_papers_of_the_issue_are_each_compared_somewhere() -> None:
    sources = " ".join(f.source for f in FINDINGS)
    for paper in ("Zoology", "Grazzi", "RULER", "lin-attn-bench", "Mechanistic Design"):
        assert paper in sources
    assert {f.verdict for f in FINDINGS} >= {"agrees", "not reproduced"}


def test_a_family_page_shows_its_findings_and_a_page_without_shows_none(matrix_site: Path) -> None:  # noqa: F811
    deltanet = (matrix_site / "families" / "deltanet.html").read_text(encoding="utf-8")
    assert "Against the published findings" in deltanet
    assert len(findings_for(FINDINGS, "deltanet")) == deltanet.count('class="plain finding"') >= 3
    assert "Grazzi et al." in deltanet and "Zoology" in deltanet and "RULER" in deltanet
    section = deltanet.split("Against the published findings")[1].split("Reproduce a cell")[0]
    assert "<code>negative_eigenvalues</code>" in section and "`" not in section
    assert not findings_for(FINDINGS, "retention")
    assert "published findings" not in (matrix_site / "families" / "retention.html").read_text(encoding="utf-8")


def test_code_spans_escape_the_rest() -> None:
    assert code_spans("`a` < b & `c_d`") == "<code>a</code> &lt; b &amp; <code>c_d</code>"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("- {rows: [gla]}\n", "the fields are"),
        (
            "- {rows: gla, task: t, source: s, verdict: agrees, published: p, here: h, protocols: q, see: a.md#b}\n",
            "`rows` lists",
        ),
        (
            "- {rows: [gla], task: t, source: s, verdict: maybe, published: p, here: h, protocols: q, see: a.md#b}\n",
            "verdict 'maybe' is not one of",
        ),
        (
            "- {rows: [gla], task: t, source: s, verdict: agrees, published: p, here: h, protocols: q, see: a.md}\n",
            "PAGE.md#anchor",
        ),
    ],
)
def test_a_malformed_entry_is_refused_in_one_line(tmp_path: Path, entry: str, message: str) -> None:
    (tmp_path / "published.yaml").write_text(entry)
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        read_findings(tmp_path)
    assert read_findings(tmp_path / "elsewhere") == []
