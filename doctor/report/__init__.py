"""`gpu-doctor report`: one redacted, self-contained report for a support ticket.

collect (raw document) -> redact (one pass over the document and every bundled
file) -> render (JSON, Markdown, HTML, or a .tar.gz bundle). Renderers only
ever see the redacted document, so nothing they print can leak.
"""
