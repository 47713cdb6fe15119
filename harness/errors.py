"""User-facing errors: the CLI prints their message on one line and exits with code 2."""

from harness.wiki_snapshot.errors import SearchServiceUnavailable, SnapshotError


class HarnessError(Exception):
    """Bad input or an unusable environment; the message is shown to the user as is."""


class ConfigError(HarnessError):
    pass


class DatasetError(HarnessError):
    pass


class ModelError(HarnessError):
    """A backend cannot be created or reached (missing key, unreachable server, bad model)."""


class TransientModelError(Exception):
    """A request failed in a way worth retrying (429, 5xx, timeout, dropped connection).

    ``retry_after`` carries the server's Retry-After hint in seconds, when it sent one.
    ``should_retry`` False: the server said this request is not worth sending again
    (``x-should-retry: false``, or a wait past ``--retry-max-wait``): it fails at once, as this
    sample's failure, and a rerun sends it again.
    """

    def __init__(
        self, message: str, retry_after: float | None = None, status: int | None = None, should_retry: bool = True
    ):
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status
        self.should_retry = should_retry


class ProcessDiedError(ModelError):
    """A process the run depends on (the local model's worker, a launched model server) died: the
    run stops and says what died and how, where its log is, and that rerunning resumes."""

    exit_code = 3

    def __init__(self, what: str, pid: int | None, returncode: int | None, log_path: str | None = None):
        self.what, self.pid, self.returncode, self.log_path = what, pid, returncode, log_path
        self.sample_id: str | None = None  # set by the runner: the sample being answered
        super().__init__(self.describe())

    def how(self) -> str:
        return describe_exit(self.returncode)

    def describe(self) -> str:
        where = f" while answering sample {self.sample_id}" if self.sample_id else ""
        log = f"; its log: {self.log_path}" if self.log_path else ""
        return f"{self.what} (pid {self.pid}) died of {self.how()}{where}{log}"


def describe_exit(returncode: int | None) -> str:
    """``-11`` -> ``signal 11, SIGSEGV``; ``3`` -> ``exit code 3``."""
    import signal

    if returncode is None:
        return "an unknown cause (still running?)"
    if returncode < 0:  # Popen's way of saying "killed by signal -returncode"
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"signal {-returncode}, {name}"
    return f"exit code {returncode}"


class ContextOverflowError(ModelError):
    """The prompt does not fit the model's context window. Recorded per sample, never truncated."""


class MissingEvidenceError(HarnessError):
    """Evidence pages of a question are not in the snapshot: the sample is recorded, not answered blind."""

    def __init__(self, titles: list[str]):
        super().__init__(f"{len(titles)} evidence page(s) not in the snapshot: {', '.join(titles[:5])}")
        self.titles = titles


class SampleFailure(HarnessError):
    """A strategy's verdict that one sample cannot be answered as configured: recorded as a failure
    of type ``error_type`` (never as an answer), the run goes on. Subclasses set ``error_type`` and
    ``retryable`` (False: rerunning the same command fails the same way)."""

    error_type = "sample_failure"
    retryable = False


class NoEvidencePackedError(SampleFailure):
    """Evidence-provided packed not one evidence chunk into the prompt: the model would answer blind."""

    error_type = "no_evidence_packed"


class StrategyStoppedRun(HarnessError):
    """A strategy reached past its sample where no sample could hold it (``sys.exit`` from a thread,
    a task that outlived its sample), or held the event loop past --sample-timeout plus --freeze-grace:
    the run stops, one line naming it (harness.execution.guard, harness.execution.watchdog)."""

    exit_code = 5


# What the CLI reports as bad input (one line, exit 2): the harness's errors and its snapshot library's,
# and a search service (--search-url) gone while nothing is being answered (inside a sample it is that
# sample's failure, search_unavailable: harness.execution.attempt)
USER_ERRORS = (HarnessError, SnapshotError, SearchServiceUnavailable)
