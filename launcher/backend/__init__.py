"""The backend seam: the protocols every backend implements (``protocols``), how backends are found
(``registry``, the ``launcher.backends`` entry-point group), the user's targets (``config``),
what a backend honours (``support``), a spec with the installed backends' sections
(``sections``), and what backends share to render a job (``templating``, ``staging``,
``factsfile``). The core never imports a concrete backend.
"""
