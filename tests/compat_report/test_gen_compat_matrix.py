"""scripts/gen_compat_matrix.py splices a generated matrix into docs/compatibility.md."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gen_compat_matrix.py"
_spec = importlib.util.spec_from_file_location("gen_compat_matrix", SCRIPT)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

PAGE = f"# Compatibility\n\nHow to run it.\n\n{gen.BEGIN}\nold matrix\n{gen.END}\n\n## APIs\n\nhand-written\n"


def test_splice_replaces_only_the_text_between_the_markers():
    assert gen.splice(PAGE, "| new | matrix |\n") == (
        f"# Compatibility\n\nHow to run it.\n\n{gen.BEGIN}\n| new | matrix |\n{gen.END}\n\n## APIs\n\nhand-written\n")


def test_splicing_the_same_matrix_twice_changes_nothing_more():
    once = gen.splice(PAGE, "matrix\n")
    assert gen.splice(once, "matrix\n") == once


def test_a_page_without_the_markers_is_refused():
    with pytest.raises(ValueError, match="matrix:begin"):
        gen.splice("# Compatibility\n", "matrix")


def test_the_compatibility_page_has_the_markers_in_order():
    page = (SCRIPT.parents[1] / "docs" / "compatibility.md").read_text()
    assert page.index(gen.BEGIN) < page.index(gen.END)
