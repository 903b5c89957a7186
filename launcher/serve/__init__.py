"""``launcher serve``: a live, read-only web view of the jobs, served by the Python process
itself (``http.server``; no front-end build step).

``server`` holds the HTTP server (a fixed pool of threads, the token check, the routes),
``pages`` renders the HTML (every value escaped), ``timeline`` draws a job's attempt
timeline as inline SVG from its report, ``assets`` the stylesheet and the small script that
refreshes a page in place. The data comes from ``launcher.api.readview.ReadView``, which
reads the state store read-only and never writes it.
"""
