"""The one error this package raises for bad input or an unusable file; callers show its message as is.

``wiki_snapshot`` imports nothing from ``harness`` (it is a library the harness uses), so it has its
own error type; the harness CLI prints it on one line and exits 2, like its own ``HarnessError``."""


class SnapshotError(Exception):
    """Bad input or an unusable snapshot, dump or index; the message is shown to the user as is."""
