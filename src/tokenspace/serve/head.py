"""HEAD for every GET route (uptime checks, ``curl -I``): FastAPI's ``@app.get`` answers HEAD with 405.

The request goes to the app as the GET it stands for, and the response's body is dropped, its headers
(Content-Length included) kept. Declaring each route for GET and HEAD instead would list every route
twice in the OpenAPI schema, under one operation id.
"""
from __future__ import annotations


class HeadAsGet:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "HEAD":
            return await self.app(scope, receive, send)

        async def headers_only(message):
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return  # a streamed body's chunks: nothing of them goes out
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        return await self.app(dict(scope, method="GET"), receive, headers_only)
