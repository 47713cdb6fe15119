"""The one error this package raises for bad input or an unusable file; callers show its message as is.

``wiki_snapshot`` imports nothing from ``harness`` (it is a library the harness uses), so it has its
own error type; the harness CLI prints it on one line and exits 2, like its own ``HarnessError``."""


class SnapshotError(Exception):
    """Bad input or an unusable snapshot, dump or index; the message is shown to the user as is."""


class SearchServiceUnavailable(Exception):
    """A search service (``harness search serve``) did not answer after its tries (refused, reset,
    timed out, a 5xx). The sample that needed it fails as a transient failure, retried by a rerun;
    it is never read as an empty search result. Not a SnapshotError: nothing about the input is wrong."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason  # the last try's failure, in a few words


class SearchServiceChanged(SnapshotError):
    """The service now serves another snapshot than the one the run was keyed to: the run stops (one line)."""
