"""Production static files, served by the web process itself: whitenoise, with the file's body
handed to the event loop asynchronously.

whitenoise's middleware returns each file as a synchronous iterator, which Django's ASGI handler
warns about and reads on the request's thread in blocks. This middleware keeps whitenoise's work,
namely the file table built once at start, hashed names cached for ten years, the compressed
variants that collectstatic made, conditional and range requests, and only changes the hand-over.

Only used with debug off; in debug, gpusched/asgi.py serves the apps' static folders directly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponseBase
from whitenoise.middleware import WhiteNoiseMiddleware

GetResponse = Callable[[HttpRequest], HttpResponseBase]


class StaticFilesMiddleware:
    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        # whitenoise reads STATIC_ROOT and the WHITENOISE_* settings; it never calls on to the
        # next middleware itself, this class does.
        self.whitenoise = WhiteNoiseMiddleware(get_response=None)

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        static_file = self.whitenoise.files.get(request.path_info)
        if static_file is None:
            return self.get_response(request)
        response = self.whitenoise.serve(static_file, request)
        response.streaming_content = _read_in_a_thread(response.streaming_content)
        return response


async def _read_in_a_thread(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    # Static files are small: one thread hop reads the whole file, instead of one hop per 4 KiB
    # block, and the event loop never waits on the disk.
    yield await sync_to_async(b"".join, thread_sensitive=False)(chunks)
