"""What ``pip install .`` ships: every data file the package reads at run time is matched by
``[tool.setuptools.package-data]`` (a configuration folder added without its pattern would be
missing from an installed zoo and found only in a clone)."""

from __future__ import annotations

import pytest

from tests.helpers import PROJECT_ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

PACKAGE = PROJECT_ROOT / "zoo"


def test_every_configuration_and_template_is_package_data() -> None:
    patterns = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["zoo"]
    shipped = {path for pattern in patterns for path in PACKAGE.glob(pattern) if path.is_file()}
    data = {
        path
        for folder in ("configs", "board/templates")
        for path in (PACKAGE / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert data, "no data files found: the test looks in the wrong place"
    assert sorted(str(p.relative_to(PACKAGE)) for p in data - shipped) == []
    assert any(path.parent.name == "yardsticks" for path in shipped)
