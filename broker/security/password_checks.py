"""PLAIN's password checks, kept off the broker's event loops.

A PLAIN password (a data-plane SASL_AUTHENTICATE, or a gRPC call's ``Basic`` credentials)
is checked against the user's SCRAM-SHA-256 credential, which costs a PBKDF2 of the
credential's iterations: milliseconds on purpose, and a wrong password or an unknown user
costs it every time. Run on the data plane's event loop (or grpc.aio's), every client of
the broker would wait while someone tried passwords. Here a recent success
(rill.client.security.plain's :class:`~rill.client.security.plain.PasswordCache`) answers
at once, and anything else runs on :data:`WORKERS` threads of its own (hashlib's PBKDF2
lets go of the GIL). A flood of wrong passwords then queues only behind itself: it
delays other first-time PLAIN logins, never a request of an authenticated client.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from rill.client.security.plain import PasswordCache
from rill.client.security.scram import ScramCredential

__all__ = ["PasswordChecks", "WORKERS"]

WORKERS = 2
"""Threads that run PBKDF2s (the machines rill targets have a few cores; the loops keep theirs)."""

Lookup = Callable[[str], ScramCredential | None]  # user -> its SCRAM-SHA-256 credential, or None


class PasswordChecks:
    """Checks ``(user, password)`` pairs by ``lookup``'s credentials, remembering successes in ``cache``."""

    def __init__(self, lookup: Lookup, cache: PasswordCache | None = None) -> None:
        self.lookup = lookup
        self.cache = cache or PasswordCache()
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="rill-password-check")
        self._closed = False

    def check(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s, on the calling thread (a PBKDF2 unless remembered)."""
        return self.verify(user, password, self.lookup(user))

    def verify(self, user: str, password: str, credential: ScramCredential | None) -> bool:
        """:meth:`check` against ``user``'s ``credential``, already looked up (None: an unknown user)."""
        return self.cache.verify(user, password, credential)

    def submit(self, user: str, password: str) -> Future[bool]:
        """:meth:`check` on the checking threads (the credential looked up once, here). The future is done at
        once when the pair is remembered, or once closed (then the check runs here, for the calls still
        answered while the broker stops); a check still queued at :meth:`close` is cancelled."""
        credential = self.lookup(user)
        done: Future[bool] = Future()
        if self.cache.remembered(user, password, credential):
            done.set_result(True)
            return done
        if not self._closed:
            try:
                return self._pool.submit(self.verify, user, password, credential)
            except RuntimeError:  # closed between the test and the submit
                pass
        done.set_result(self.verify(user, password, credential))
        return done

    def close(self) -> None:
        """Let the checks under way finish, cancel queued ones, and let the threads go. Idempotent."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
