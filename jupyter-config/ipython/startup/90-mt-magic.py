"""mt_magic autoload: declares %%mtsql and %mtsql lazily, so nothing is imported until first use.

Installed into {sys.prefix}/etc/ipython/startup/ by `pip install mt-magic`. IPython runs this file
in the user namespace of every shell and kernel of that environment, hence the function and `del`.
Set MT_MAGIC_NO_AUTOLOAD=1 to turn it off; `%load_ext mt_magic` still works then.
"""


def _mt_magic_autoload() -> None:
    import importlib.util
    import os

    if os.environ.get("MT_MAGIC_NO_AUTOLOAD", "").strip().lower() not in ("", "0", "false", "no"):
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or importlib.util.find_spec("mt_magic") is None:
        return
    if "mtsql" not in shell.magics_manager.magics["cell"]:
        shell.magics_manager.register_lazy("mtsql", "mt_magic")

        def first_tab(context):
            """Tab in a %%mtsql cell before the magic first ran: load the extension, then complete."""
            if not (context.full_text.lstrip().startswith("%%mtsql") or "%mtsql" in context.line_with_cursor):
                return {"completions": [], "suppress": False}
            shell.extension_manager.load_extension("mt_magic")      # it removes this matcher
            return shell.__dict__["_mt_magic_magics"].completer.complete(context)

        first_tab.matcher_api_version = 2
        first_tab.matcher_identifier = "mt_magic.autoload"
        shell.Completer.custom_matchers.append(first_tab)


_mt_magic_autoload()
del _mt_magic_autoload
