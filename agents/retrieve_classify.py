"""retrieve-classify: QUEST's retrieve-then-classify baseline with an LLM as the relevance
classifier. The top-K entity documents (K = 100, QUEST's ``xattn/gen_inference_inputs.py
--topk``) are retrieved for the query; each is shown to the model as its title and text, cut to
``classify_doc_tokens`` tokens (QUEST: 384 word pieces of ``title + " " + text``; the cut is
recorded per document), with a yes/no question; the answer is the list of titles judged relevant,
one per line, so the ``quest`` metric scores it. With passages smaller than a page, an entity is
ranked by its best passage and its document is that page's text.
"""

from __future__ import annotations

import re

from harness.agents._knobs import RetrievalKnobs, passage_knob, retrieval_k_knob
from harness.agents._retrieve import RetrievalAgent
from harness.strategy import AgentContext, SampleResult, knob

_YES_NO = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
_WORD = re.compile(r"\S+")


def judge(reply: str) -> bool | None:
    """True for yes, False for no, None when the reply starts with neither."""
    m = _YES_NO.match(reply or "")
    return None if m is None else m.group(1).casefold() == "yes"


K_SOURCE = "QUEST: the classifier scores the retriever's top 100 documents (gen_inference_inputs.py --topk)"


class RetrieveClassify(RetrievalAgent):
    default_template = "retrieve_classify"
    template_fields = ("title", "document")
    k_source = K_SOURCE

    class Knobs(RetrievalKnobs):
        retrieval_k: int = retrieval_k_knob(100, K_SOURCE)
        passage_kind: str = passage_knob("page")
        classify_doc_tokens: int = knob(
            384, "retrieve-classify: document tokens shown (QUEST: 384)", ge=16, le=1_000_000
        )

    def describe(self):
        return {**super().describe(), "classifier": "the model, yes/no per entity document"}

    def truncate(self, text: str) -> tuple[str, int, bool]:
        """The longest prefix (whole words) of at most ``classify_doc_tokens`` model tokens."""
        limit = self.knobs.classify_doc_tokens
        count = self.model.count_tokens
        n = count(text)
        if n <= limit:
            return text, n, False
        ends = [m.end() for m in _WORD.finditer(text)]
        lo, hi = 0, len(ends)
        while lo < hi:  # largest number of words whose prefix fits
            mid = (lo + hi + 1) // 2
            if count(text[: ends[mid - 1]]) <= limit:
                lo = mid
            else:
                hi = mid - 1
        cut = text[: ends[lo - 1]] if lo else ""
        return cut, count(cut), True

    def entities(self, query: str):
        if self.passages == "page":
            return self.retrieve(query)
        seen, out = set(), []
        for h in self.retrieve(query, self.k * 8):  # an entity ranks by its best passage
            if h.title not in seen:
                seen.add(h.title)
                out.append(h)
            if len(out) == self.k:
                break
        return out

    async def solve(self, sample, ctx: AgentContext) -> SampleResult:
        query, question, rewrite, transcript = await self.question_for(sample, ctx)
        hits = self.entities(query)

        async def classify(rank: int, hit):
            page = self.snapshot.get_page(hit.pageid)
            text = page.text if page is not None and self.passages != "page" else hit.text
            document, tokens, truncated = self.truncate(f"{hit.title} {text}")
            prompt = self.prompt(question, title=hit.title, document=document)
            messages = [{"role": "user", "content": prompt}]
            response = await ctx.generate(messages)
            verdict = judge(response.content or "")
            record = {
                "rank": rank + 1,
                **hit.record(),
                "doc_tokens": tokens,
                "doc_truncated": truncated,
                "reply": response.content or "",
                "finish_reason": response.finish_reason,
                "kept": verdict is True,
                "parsed": verdict is not None,
            }
            return record, messages + [response.as_message()]

        done = await self.gather_limited(classify(i, h) for i, h in enumerate(hits))
        judgments = [r for r, _ in done]
        for _, exchange in done:
            transcript = transcript + exchange
        kept = [j["title"] for j in judgments if j["kept"]]
        extra = {
            **self.retrieval_extra(sample, query, hits, rewrite),
            "judgments": judgments,
            "kept": len(kept),
            "unparsed_replies": sum(1 for j in judgments if not j["parsed"]),
        }
        return SampleResult(answer="\n".join(kept), messages=transcript, extra=extra)
