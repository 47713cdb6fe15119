"""ircot: IRCoT (Trivedi et al., ACL 2023), retrieval interleaved with a chain of thought. The
question retrieves K passages from the snapshot's corpus passage index (``harness index build``);
the model writes ONE sentence of a chain of thought, in a prompt of the passages so far, the question
and the chain so far (``prompts/ircot.txt``: ``Wikipedia Title: T`` blocks, ``Q:``, ``A:``); that
sentence retrieves K more; new passages (not already held: same passage, or same title and text) are
added up to ``max_passages``; and so on until a sentence says ``... answer is: X`` (the answer is X,
a final full stop removed) or ``max_steps`` sentences were written (outcome ``max_steps``, no answer).

Defaults are the reference code's (StonyBrookNLP/ircot): K = 6 (``bm25_retrieval_count`` of its
HotpotQA configs; the paper tunes K in {2, 4, 6, 8} per dataset), at most 15 passages
(``global_max_num_paras``), 10 sentences (``max_num_sentences``), each passage cut to 350 words in
the prompt (``max_para_num_words``). Passages that do not fit the context (minus ``--max-tokens``)
are left out of that step's prompt, newest first, and the step records it (``cut``); a prompt with
not one passage fails the sample as ``no_evidence_packed``. Every step is in the shared record ``trace`` (the report draws it).
"""

from __future__ import annotations

import re
from typing import Any

from harness.agents._knobs import RetrievalKnobs, passage_knob
from harness.agents._retrieve import RetrievalAgent
from harness.agents._search import ContextGuard
from harness.errors import ContextOverflowError, NoEvidencePackedError
from harness.strategy import AgentContext, SampleResult, knob

K_SOURCE = "IRCoT's HotpotQA configs (bm25_retrieval_count = 6; the paper tunes K in {2, 4, 6, 8})"
PASSAGES_SOURCE = "IRCoT's global_max_num_paras = 15"
STEPS_SOURCE = "IRCoT's max_num_sentences = 10"
WORDS_SOURCE = "IRCoT's max_para_num_words = 350"

_ANSWER = re.compile(r"\banswer is:?\s+(?P<answer>\S.*)", re.IGNORECASE)
_A_LABEL = re.compile(r"^\s*A\s*:\s*")
# the model went on to an example of its own: nothing from there on is its answer
_NEW_EXAMPLE = re.compile(r"^\s*(?:Q\s*:|Wikipedia Title\s*:)", re.IGNORECASE)


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def sentences(text: str) -> list[str]:
    """Sentences of one line of text (spaCy's rule-based sentencizer, as the passage splitter uses)."""
    from harness.wiki_snapshot.passages import sentencizer

    return [s.text.strip() for s in sentencizer()(text).sents if s.text.strip()]


def next_sentence(reply: str | None, chain: list[str]) -> tuple[str | None, int]:
    """(the first sentence of ``reply`` the chain does not hold yet, the sentences skipped as repeats).

    The reference keeps the first sentence of a completion; a chat model may first repeat the chain
    it was shown, so sentences already in it are passed over. An ``A:`` label opening a line is
    dropped; a line opening a new example (``Q:``, ``Wikipedia Title:``) ends the reply."""
    known = {_fold(s) for s in chain}
    repeats = 0
    for line in (reply or "").splitlines():
        if _NEW_EXAMPLE.match(line):
            break
        line = _A_LABEL.sub("", line, count=1).strip()
        for sentence in sentences(line) if line else []:
            if _fold(sentence) in known:
                repeats += 1
                continue
            return sentence, repeats
    return None, repeats


def answer_in(sentence: str) -> str | None:
    """What follows ``answer is:`` in ``sentence`` (a final full stop removed), or None."""
    match = _ANSWER.search(sentence)
    if match is None:
        return None
    answer = match["answer"].strip()
    if answer.endswith("."):
        answer = answer[:-1].rstrip()
    return answer or None


def first_words(text: str, n: int) -> str:
    words = text.split()
    return text.strip() if len(words) <= n else " ".join(words[:n])


class IRCoT(RetrievalAgent):
    """IRCoT: one chain-of-thought sentence per step, each retrieving more passages."""

    default_template = "ircot"
    template_fields = ("documents", "cot")
    needs_context_size = True
    records = ("evidence_recall", "trace")
    k_source = K_SOURCE

    class Knobs(RetrievalKnobs):
        retrieval_k: int = knob(6, f"passages retrieved per step (the question, then each sentence); default 6: {K_SOURCE}", ge=1, le=1_000_000)  # fmt: skip
        passage_kind: str = passage_knob("words100")
        max_passages: int = knob(15, f"passages held at most; default 15: {PASSAGES_SOURCE}", ge=1, le=1_000_000)
        max_steps: int = knob(10, f"chain-of-thought sentences at most; default 10: {STEPS_SOURCE}", ge=1, le=10_000)
        max_passage_words: int = knob(350, f"words of a passage shown; default 350: {WORDS_SOURCE}", ge=1, le=10_000_000)  # fmt: skip

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "reader": "one chain-of-thought sentence per step, each retrieving more passages",
            "defaults_source": {
                "max_passages": PASSAGES_SOURCE,
                "max_steps": STEPS_SOURCE,
                "max_passage_words": WORDS_SOURCE,
            },
        }

    def summarize(self, extras: list[dict[str, Any]]) -> dict[str, Any] | None:
        out = super().summarize(extras) or {}
        stepped = [e for e in extras if "steps" in e]
        if stepped:
            out["steps_mean"] = sum(e["steps"] for e in stepped) / len(stepped)
            out["passages_mean"] = sum(e["passages_held"] for e in stepped) / len(stepped)
        return out or None

    def documents(self, hits) -> str:
        return "\n\n".join(
            f"Wikipedia Title: {h.title}\n{first_words(h.text, self.knobs.max_passage_words)}" for h in hits
        )

    def build_prompt(self, question: str, held: list, chain: list[str], budget: int) -> tuple[str, int]:
        """The prompt with the longest prefix of ``held`` that fits ``budget`` tokens, and its length."""

        def render(n: int) -> str:
            return self.prompt(question, documents=self.documents(held[:n]), cot=" ".join(chain))

        lo, hi = 0, len(held)
        while lo < hi:  # binary search: few full-prompt token counts
            mid = (lo + hi + 1) // 2
            if self.model.count_tokens(render(mid)) <= budget:
                lo = mid
            else:
                hi = mid - 1
        return render(lo), lo

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        query, question, rewrite, transcript = await self.question_for(sample, ctx)
        held: list = []
        seen: set = set()
        trace: list[dict[str, Any]] = []
        ctx.partial["trace"] = trace  # kept by a sample that fails midway

        def retrieve(q: str) -> dict[str, Any]:
            hits = self.retrieve(q)
            new, capped = [], 0
            for h in hits:
                keys = (h.passage_id, (_fold(h.title), _fold(h.text)))
                if keys[0] in seen or keys[1] in seen:
                    continue
                if len(held) >= self.knobs.max_passages:
                    capped += 1
                    continue
                held.append(h)
                seen.update(keys)
                new.append(h)
            return {
                "query": q,
                "retrieved": len(hits),
                "new_titles": [h.title for h in new],
                "new_passages": [h.passage_id for h in new],
                "over_cap": capped,  # new passages left out: max_passages reached
            }

        trace.append({"step": 0, "sentence": None, **retrieve(query)})
        # one request a step: the reply must fit beside the prompt
        budget = (self.model.context_size() or 0) - ctx.params.max_tokens - ContextGuard.PER_MESSAGE_OVERHEAD
        chain: list[str] = []
        messages = list(transcript)
        answer, outcome, steps = None, "max_steps", 0
        for step in range(1, self.knobs.max_steps + 1):
            prompt, shown = self.build_prompt(question, held, chain, budget)
            if shown == 0:  # the model would reason blind: a failure, never an answer
                raise NoEvidencePackedError(
                    "no passage was retrieved for the question"
                    if not held
                    else f"not one of {len(held)} passages fits the IRCoT prompt in {budget} tokens "
                    f"(context {self.model.context_size()} - max tokens {ctx.params.max_tokens}): "
                    "pass a larger --context-size"
                )
            request = [{"role": "user", "content": prompt}]
            try:
                response = await ctx.generate(request)
            except ContextOverflowError:
                outcome = "context_full"
                break
            steps = step
            messages += request + [response.as_message()]
            sentence, repeats = next_sentence(response.content, chain)
            entry: dict[str, Any] = {"step": step, "sentence": sentence, "passages_shown": shown}
            if shown < len(held):
                entry["cut"] = len(held) - shown  # held passages that did not fit this prompt
            if repeats:
                entry["repeated_sentences_skipped"] = repeats
            if sentence is None:  # nothing new to reason with or retrieve by
                entry["reply"] = response.content or ""
                trace.append(entry)
                outcome = "no_sentence"
                break
            chain.append(sentence)
            found = answer_in(sentence)
            if found is not None:
                entry["answer"] = found
                trace.append(entry)
                answer, outcome = found, "answered"
                break
            if step < self.knobs.max_steps:  # after the last sentence nothing would read what is retrieved
                entry.update(retrieve(sentence))
            trace.append(entry)
        extra = {
            **self.retrieval_extra(sample, query, held, rewrite),
            "max_passages": self.knobs.max_passages,
            "steps": steps,
            "passages_held": len(held),
            "chain": chain,
            "trace": trace,
        }
        return SampleResult(answer=answer, messages=messages, extra=extra, outcome=outcome)
