"""The architecture checks itself: import-linter's contracts hold, a broken one fails, and the layers
table of docs/architecture.md names what the code has, in the contracts' order. No Spark needed."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def contract_layers() -> list[set[str]]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    return [{m.strip().removeprefix("mt_magic.") for m in re.split(r"[|:]", layer)} for layer in layers]


def test_the_import_contracts_hold():
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "0 broken" in out.stdout


def lint_with_line(tmp_path: Path, module: str, line: str) -> str:
    """lint-imports' report on a copy of the package with `line` added to `module` (sql/tokens.py …)."""
    shutil.copytree(ROOT / "mt_magic", tmp_path / "mt_magic", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "mt_magic" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    out = lint(tmp_path)
    assert out.returncode != 0
    return out.stdout


def test_an_upward_import_breaks_the_layers(tmp_path):
    report = lint_with_line(tmp_path, "sql/tokens.py", "from mt_magic.manager import refresh_runs")
    assert "Layers: imports point down BROKEN" in report
    assert "mt_magic.sql is not allowed to import mt_magic.manager" in report


def test_pyspark_in_sql_breaks_its_contract(tmp_path):
    report = lint_with_line(tmp_path, "sql/freshness.py", "import pyspark")
    assert "sql/ is syntax only: no Spark, no catalog, no notebook BROKEN" in report


def test_a_second_reader_of_sql_text_breaks_the_one_lexer(tmp_path):
    report = lint_with_line(tmp_path, "sql/placeholders.py", "import sqlparse")
    assert "One lexer: only sql/tokens reads SQL text with sqlparse BROKEN" in report


def _table_rows() -> list[tuple[str, str]]:
    """(package, what it holds) for each row of the layers table in docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## Layers", 1)[1].split("\n\n", 2)[1]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    return [(re.sub(r"[`/]|\.py$", "", name.strip()).removesuffix(".py"), holds) for name, holds in rows]


def test_only_spark_tells_a_classic_session_from_a_connect_one():
    """The design keeps the two kinds of session apart in spark/: elsewhere a question is asked of
    what a session can do (import-linter cannot forbid one name of a module, so the names are read)."""
    asking = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "mt_magic").rglob("*.py")
                    if "spark" not in path.relative_to(ROOT / "mt_magic").parts[:1]
                    and any(isinstance(node, (ast.Name, ast.alias, ast.Attribute)) and
                            "is_connect" in (getattr(node, "id", None), getattr(node, "name", None),
                                             getattr(node, "attr", None))
                            for node in ast.walk(ast.parse(path.read_text()))))
    assert asking == [], asking


def test_the_architecture_doc_names_every_package_in_the_contracts_order():
    rows = _table_rows()
    named = [name for name, _ in rows]
    packages = sorted(p.name for p in (ROOT / "mt_magic").iterdir() if (p / "__init__.py").exists())
    assert sorted(set(packages) - set(named)) == [], "packages the doc does not name"
    layers = contract_layers()
    level = [next(i for i, layer in enumerate(layers) if name in layer) for name in named]
    assert level == sorted(level), f"the doc's order {named} is not the contracts' order {layers}"


def test_the_modules_the_doc_names_exist():
    missing = []
    for package, holds in _table_rows():
        folder = ROOT / "mt_magic" / package
        if not folder.is_dir():
            continue
        for module in re.findall(r"`([a-z_]+(?:/[a-z_]+)*)/?`", holds):
            if not (folder / f"{module}.py").exists() and not (folder / module).is_dir():
                missing.append(f"{package}/{module}")
    assert missing == []


def test_the_accepted_spark_releases_are_the_one_the_suite_runs_on():
    """The package reaches into Spark's JVM classes, whose signatures differ between releases: it
    accepts only the release its tests run on (the README says which)."""
    from importlib.metadata import requires, version
    from packaging.requirements import Requirement
    accepted = [Requirement(r) for r in requires("mt-magic") if Requirement(r).name == "pyspark"]
    assert accepted and all(version("pyspark") in r.specifier for r in accepted)
    assert not any(r.specifier.contains(older) for r in accepted for older in ("4.0.5", "4.1.4", "4.2.1"))
    said = re.search(r"accepts `pyspark([^`]+)`", " ".join((ROOT / "README.md").read_text().split()))
    assert said and Requirement("pyspark" + said.group(1)).specifier == accepted[0].specifier
