"""oracle-evidence: evidence-provided with only the gold evidence pages (``Sample.gold_evidence``:
FanOutQA's decomposition evidence, the same pages evidence-provided packs; HotpotQA's supporting-fact
pages, not all 10 context paragraphs), so a table's reader scores have their upper bound beside
them. Chunking, ranking, packing and prompt are evidence-provided's; a dataset that marks no gold
evidence is refused before the run. The ``evidence`` record adds ``gold_pages`` (the titles as the
dataset names them); ``evidence_pages`` and ``packed_titles`` are the pages as packed."""

from __future__ import annotations

from typing import Any

from harness.agents.evidence_provided import EvidenceProvided
from harness.errors import ConfigError


class OracleEvidence(EvidenceProvided):
    def __init__(self, config, knobs=None):
        super().__init__(config, knobs)
        self.gold_source: str | None = None  # what the dataset's gold pages are, once checked

    def check_dataset(self, dataset, samples) -> None:
        spec = dataset.info.spec()
        if not dataset.gold_evidence:
            raise ConfigError(
                f"agent {self.name} packs the gold evidence pages, and {spec} marks none "
                "(datasets with gold evidence: fanoutqa, hotpotqa); use --agent evidence-provided"
            )
        without = [s.id for s in samples if not s.gold_evidence]
        if without:
            raise ConfigError(
                f"agent {self.name}: {len(without)} selected question(s) of {spec} have no gold evidence pages "
                f"(first: {without[0]})"
            )
        self.gold_source = dataset.gold_evidence

    def pages(self, sample) -> list[dict[str, Any]]:
        return sample.gold_evidence

    def describe(self) -> dict[str, Any]:
        out = {**super().describe(), "pages": "gold"}
        if self.gold_source:
            out["gold_evidence"] = self.gold_source
        return out

    def build_prompt(self, sample, budget: int | None = None, chunks=None) -> tuple[str, dict[str, Any]]:
        prompt, record = super().build_prompt(sample, budget, chunks)
        record["gold_pages"] = [p["title"] for p in sample.gold_evidence]
        return prompt, record
