"""The bottom layer every other imports: user-facing errors and exit codes (``errors``), job
states and failure classes (``status``), exit statuses in words (``exitcodes``) and redaction
of secrets (``redact``).
"""
