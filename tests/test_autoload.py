"""The installed startup file, in a real kernel with a fresh IPYTHONDIR: %%mtsql without %load_ext."""

from __future__ import annotations

from helpers import run


def test_the_magic_is_declared_lazily_and_works_without_load_ext(kernel):
    client = kernel()
    _, before, _ = run(client, "import sys; ('mtsql' in get_ipython().magics_manager.lazy_magics, "
                               "'mt_magic' in sys.modules)")
    assert before == "(True, False)"           # declared, nothing imported yet
    run(client, "from mt_magic.session import local_session\nspark = local_session()")
    out, result, error = run(client, "%%mtsql\nSELECT 40 + 2 AS answer")
    assert error is None and result == "answer\n42"
    assert "using notebook variable 'spark'" in out
    _, loaded, _ = run(client, "'mt_magic' in get_ipython().extension_manager.loaded")
    assert loaded == "True"


def test_the_opt_out_variable_turns_it_off(kernel):
    client = kernel(MT_MAGIC_NO_AUTOLOAD="1")
    _, declared, _ = run(client, "'mtsql' in get_ipython().magics_manager.lazy_magics")
    assert declared == "False"
    out, _, _ = run(client, "%%mtsql\nSELECT 1")
    assert "UsageError: Cell magic `%%mtsql` not found." in out
