"""The web server's own guards, in front of Gradio: connection caps where uvicorn makes connections (connections),
the quotas on request bodies and uploads with the signed visitor cookie (quota, held), the download links answered
(downloads), the server's output bounded (logbound), and each request's server work charged to its visitor (tabs).
ASGI and uvicorn live here, never in explorer/.
"""
