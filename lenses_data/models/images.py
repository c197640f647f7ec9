"""The images of one batch, read, hashed and base64-encoded ahead of the requests that send them.

Reading a file on the event loop would stall every request in flight when the files sit on a slow
(network) file system, but handing each file to a thread costs more CPU than reading it (a thread
hop is about 0.1 ms; a 512 px JPEG is read, hashed and encoded in about as long). So one task reads
the batch's images in order, `chunk` files per thread hop, staying at most `ahead` images ahead of
the requests. An image that several requests of the batch send (the generator's prompts and
captions, the visual validator's candidates) is loaded once and dropped after its last use.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterable

from lenses_data.models.messages import LoadedImage, load_image


def _load_all(paths: list[str]) -> list[LoadedImage | Exception]:
    results: list[LoadedImage | Exception] = []
    for path in paths:
        try:
            results.append(load_image(path))
        except (OSError, ValueError) as exc:  # the request that sends it fails as bad input
            results.append(exc)
    return results


def _settle(future: asyncio.Future[LoadedImage], result: LoadedImage | Exception) -> None:
    if future.done():
        return
    if isinstance(result, Exception):
        future.set_exception(result)
        future.exception()  # retrieved here: a request that never asks for it must not warn
    else:
        future.set_result(result)


class ImagePrefetch:
    def __init__(self, paths: Iterable[str | None], chunk: int = 16, ahead: int = 256) -> None:
        used = [path for path in paths if path]
        self._uses = Counter(used)
        self._order = list(self._uses)  # distinct paths in order of first use
        self._chunk, self._ahead = chunk, ahead
        self._futures: dict[str, asyncio.Future[LoadedImage]] = {}
        self._seen: set[str] = set()  # distinct images asked for so far: where the requests have got to
        self._room = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def held(self) -> int:
        """Images loaded (or being loaded) and not yet past their last use: the memory in use."""
        return len(self._futures)

    def start(self) -> None:
        if self._order:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        for start in range(0, len(self._order), self._chunk):
            while start - len(self._seen) >= self._ahead:
                self._room.clear()
                await self._room.wait()
            chunk = self._order[start : start + self._chunk]
            paths = [p for p in chunk if p not in self._futures and p not in self._seen]
            futures = [self._futures.setdefault(p, loop.create_future()) for p in paths]
            if paths:
                results = await asyncio.to_thread(_load_all, paths)
                for future, result in zip(futures, results, strict=True):
                    _settle(future, result)

    async def get(self, path: str) -> LoadedImage:
        """The loaded image; raises OSError/ValueError for an unreadable or unknown image."""
        if path not in self._seen:
            self._seen.add(path)
            self._room.set()
        future = self._futures.get(path)
        try:
            if future is None:  # ahead of the prefetch (the first burst of requests): load it now
                future = self._futures[path] = asyncio.get_running_loop().create_future()
                _settle(future, (await asyncio.to_thread(_load_all, [path]))[0])
            return await asyncio.shield(future)
        finally:
            self._uses[path] -= 1
            if self._uses[path] <= 0:
                self._futures.pop(path, None)
