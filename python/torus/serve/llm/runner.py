"""An engine behind an event loop: every engine call runs on the runner's one thread, in the order asked.

ModelRunner(engine) serialises access to one model instance and keeps llama.cpp off the event loop:
  await runner.call(fn, *args)        runs fn(engine, *args) on the model thread and returns its result;
  async for delta in runner.stream(fn, *args)
                                      runs the generator fn(engine, *args, cancelled) on the model thread and hands
                                      its items to the loop as they come. Leaving the loop early (a client that
                                      hung up) sets `cancelled`, so the generation stops at its next token and the
                                      thread moves on to the next request.
Requests wait in the executor's queue (not in threads), so a burst of requests costs no threads.

Thread-safe; its coroutines may run on any one event loop. close() stops the thread after the queued calls.
"""

import asyncio
import concurrent.futures
import threading

_END = object()


class _Failed:
    def __init__(self, error):
        self.error = error


class ModelRunner:
    def __init__(self, engine):
        self.engine = engine
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm-model")

    async def call(self, fn, *args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, self.engine, *args)

    async def stream(self, fn, *args):
        loop = asyncio.get_running_loop()
        queue = asyncio.Queue()
        cancelled = threading.Event()

        def deliver(item):
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop closed: nobody is listening any more
                cancelled.set()

        def work():
            try:
                if cancelled.is_set():
                    return
                for item in fn(self.engine, *args, cancelled):
                    deliver(item)
            except BaseException as e:  # handed to the caller's loop, raised there
                deliver(_Failed(e))
            finally:
                deliver(_END)

        future = loop.run_in_executor(self._executor, work)
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    break
                if isinstance(item, _Failed):
                    raise item.error
                yield item
        finally:
            cancelled.set()
            if not future.done():
                future.add_done_callback(lambda f: f.exception())  # nothing left to await it

    def close(self):
        self._executor.shutdown(wait=False, cancel_futures=False)
