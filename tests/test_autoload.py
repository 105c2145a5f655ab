"""The installed startup file, in a real kernel with a fresh IPYTHONDIR: %%mtsql without %load_ext."""

from __future__ import annotations

import os
import sys

import pytest
from jupyter_client.manager import start_new_kernel


def run(client, code: str) -> tuple[str, str, dict | None]:
    """The streams' text, the text/plain result and the error (ename, evalue) of one cell."""
    out, result, error = [], "", None

    def collect(message: dict) -> None:
        nonlocal result, error
        kind, content = message["msg_type"], message["content"]
        if kind == "stream":
            out.append(content["text"])
        elif kind == "execute_result":
            result = content["data"].get("text/plain", "")
        elif kind == "error":
            error = {"ename": content["ename"], "evalue": content["evalue"]}

    client.execute_interactive(code, timeout=180, output_hook=collect)
    return "".join(out), result, error


@pytest.fixture
def kernel(tmp_path):
    started = []

    def start(**env: str):
        inherited = {k: v for k, v in os.environ.items() if k != "MT_MAGIC_NO_AUTOLOAD"}
        environment = {**inherited, "IPYTHONDIR": str(tmp_path / "ipython"), "SPARK_LOCAL_IP": "127.0.0.1",
                       "MT_MAGIC_CATALOG_STORE": str(tmp_path / "store" / "catalog.json"),
                       "PYSPARK_PYTHON": sys.executable, **env}
        manager, client = start_new_kernel(kernel_name="python3", env=environment, cwd=str(tmp_path))
        started.append((manager, client))
        return client

    yield start
    for manager, client in started:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


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
