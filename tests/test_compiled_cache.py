"""core_env.compiled_cache: numba's cached machine code never outlives the rule sources it was compiled from."""

from __future__ import annotations

import ast
import re

from core_env import compiled_cache


def _fake_package(tmp_path):
    package = tmp_path / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    (package / "rules.py").write_text("A = 1\n")
    (package / "consts.py").write_text("B = 2\n")
    return package


def _cache_files(package):
    cache = package / "__pycache__"
    for name in ("rules.step-10.py311.nbi", "rules.step-10.py311.nbc", "other.f-3.py311.nbi", "rules.cpython-311.pyc"):
        (cache / name).write_bytes(b"x")
    return cache


def test_guard_drops_the_compiled_cache_exactly_when_a_source_changes(tmp_path):
    package = _fake_package(tmp_path)
    cache = _cache_files(package)
    run = dict(package=package, sources=("rules.py", "consts.py"), compiled=("rules",))
    assert compiled_cache.guard(**run) == 2  # no stamp yet: the cache's origin is unknown
    assert sorted(p.name for p in cache.iterdir()) == ["compiled_rules.sha256", "other.f-3.py311.nbi", "rules.cpython-311.pyc"]
    _cache_files(package)
    assert compiled_cache.guard(**run) == 0  # same sources: the cache stays
    assert (cache / "rules.step-10.py311.nbi").exists()
    (package / "consts.py").write_text("B = 3\n")  # a constant the compiled code froze changed
    assert compiled_cache.guard(**run) == 2
    assert not (cache / "rules.step-10.py311.nbc").exists()
    assert (cache / compiled_cache.STAMP).read_text().strip() == compiled_cache.sources_digest(package, ("rules.py", "consts.py"))


def test_the_sources_cover_every_compiled_module_and_every_core_env_module_they_import():
    package = compiled_cache.PACKAGE
    # a compiled function: decorated with numba's njit or with one of core_env.jit's decorators
    with_njit = {p.stem for p in package.glob("*.py") if re.search(r"^\s*@(njit\(|compiled$|inlined$|unowned$)", p.read_text(), re.MULTILINE)}
    assert {"rules", "dynamics", "features", "sim"} <= with_njit <= set(compiled_cache.COMPILED)
    imported = set()
    for name in compiled_cache.COMPILED:
        for node in ast.walk(ast.parse((package / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "core_env":
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("core_env."):
                imported.add(node.module.split(".")[1])
    imported.discard("compiled_cache")
    files = {f"{name}.py" if (package / f"{name}.py").exists() else f"{name}/__init__.py" for name in imported}
    assert files <= set(compiled_cache.SOURCES), files - set(compiled_cache.SOURCES)


def test_importing_the_engine_stamps_its_cache_with_the_current_sources():
    import core_env.vector  # noqa: F401  (imports dynamics, which runs the guard)

    stamp = compiled_cache.PACKAGE / "__pycache__" / compiled_cache.STAMP
    assert stamp.read_text().strip() == compiled_cache.sources_digest()
