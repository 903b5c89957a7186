"""The library's door: ``Launcher`` (``facade``), the typed results it returns (``results``), the
errors it raises and the CLI's exit codes (``errors``) and the application context it works in
(``context``: config, registry, state store, backends).
"""
