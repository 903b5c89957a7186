"""The library's door: ``Launcher`` (``facade``), the typed results it returns (``results``) and the
application context it works in (``context``: config, registry, state store, backends).
"""
