"""``--log-to wandb``: one W&B run per finished harness run (``wandb.init``, then ``finish``).

Where it goes is W&B's own choice, from its environment (https://docs.wandb.ai/guides/track/environment-variables/):
WANDB_MODE (``offline``: a local run folder under WANDB_DIR, ``wandb sync`` uploads it later),
WANDB_PROJECT (default here: manyanswer-harness), WANDB_ENTITY, and the API key W&B reads itself
(``wandb login`` or WANDB_API_KEY; never read or written by the harness).

What it holds: the configuration (``run.config``, flattened keys) with the link back
(``harness.run_dir``, ``harness.run_uri``, ``harness.run_id``, ``harness.version``, ...); every score
and its interval in ``run.summary`` (``KEY``, ``KEY/lower``, ``KEY/upper``, ``KEY/n``,
``KEY/stderr``; a score without a value is None there), the counts; the per-question table
(``wandb.Table`` logged as ``questions``); the HTML report as an artifact of type ``report``.

Set up not to send what the harness does not choose to: no console capture (``console="off"``), no
system metadata (``x_disable_meta``: W&B's metadata holds the process's argv and git remote, where a
credential may sit), no system metrics (``x_disable_stats``: they also probe a cloud metadata
address), no git, no code. Those ``x_`` settings are W&B's private ones (wandb 0.31's
``wandb.Settings``); tests/test_trackers.py reads the offline run folder back and checks that no
metadata file is written.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.analysis.trackers import DEFAULT_PROJECT, REPORT_NAME, TABLE_NAME, TrackedRun, Tracker
from harness.errors import HarnessError

_LOCAL_MODES = ("offline", "disabled", "dryrun")  # WANDB_MODE values that need no key (W&B's env-variable docs)


class WandbTracker(Tracker):
    name = "wandb"
    package = "wandb"
    extra = "wandb"

    @classmethod
    def check(cls, given: str) -> None:
        """Online W&B with no API key fails only after the run (or prompts for one): refused before it.
        The key is where W&B reads it: WANDB_API_KEY, or ~/.netrc (NETRC) for WANDB_BASE_URL's host,
        where `wandb login` stores it (docs.wandb.ai/ref/cli/wandb-login/). The key is never read out."""
        super().check(given)
        if os.environ.get("WANDB_MODE", "").strip().lower() in _LOCAL_MODES or os.environ.get("WANDB_API_KEY"):
            return
        import netrc
        from urllib.parse import urlsplit

        host = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or ""
        path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
        try:
            if netrc.netrc(path).authenticators(host):
                return
        except (OSError, netrc.NetrcParseError):
            pass
        raise HarnessError(
            f"--log-to {given}: W&B is online and has no API key (set WANDB_API_KEY or run `wandb login`), "
            "or set WANDB_MODE=offline for a local run folder (`wandb sync` uploads it)"
        )

    def log(self, run: TrackedRun) -> str:
        import wandb

        settings = wandb.Settings(
            console="off",
            disable_git=True,
            save_code=False,
            silent=True,
            x_disable_meta=True,
            x_disable_stats=True,
            x_disable_machine_info=True,
        )
        live = wandb.init(
            project=None if os.environ.get("WANDB_PROJECT") else DEFAULT_PROJECT,
            name=run.run_id,
            group=run.run_id,  # the runs logged by its invocations side by side
            job_type="eval",
            config={**run.config, **run.links},
            settings=settings,
            reinit="create_new",  # its own run object, finished here (a notebook's open run left alone)
        )
        ok = False
        try:
            summary = {key: metric.value for key, metric in run.metrics.items()}  # None: n/a
            summary.update(run.numbers())
            if run.headline:
                summary["headline"] = run.headline
            live.summary.update(summary)
            table = wandb.Table(columns=run.columns, data=run.rows, allow_mixed_types=True)
            live.log({TABLE_NAME: table})
            artifact = wandb.Artifact(_artifact_name(run.run_id), type="report")
            artifact.add_file(str(run.report), name=REPORT_NAME)
            live.log_artifact(artifact)
            where = f"offline run in {Path(live.dir).parent}" if live.offline else live.url
            ok = True
        finally:
            live.finish(exit_code=0 if ok else 1)
        return f"W&B run {live.id} ({where})"


def _artifact_name(run_id: str) -> str:
    # an artifact's name: letters, digits, dashes, underscores and dots
    return "report-" + re.sub(r"[^A-Za-z0-9_.-]", "-", run_id)
