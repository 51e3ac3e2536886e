"""Time to first token on a follow-up question, before and after the prompt-cache layout.

The request tag used to open the system message ("Request tag: {tag}.\\n" + the
instructions), so no two requests shared a prefix and a server's prompt cache could reuse
nothing. Now the instructions (``SYSTEM_MESSAGE``) are the same for every request and the
tag opens the user's message. This bench measures both layouts on the same real server
(llama.cpp's, bench/llm_server.py, SmolLM2-135M-Instruct) with the same questions and the
same sources, in one run:

- "before": today's instructions with the tag line prepended, the user message without
  its tag line (the old layout, rebuilt here);
- "after": ``core.generation.prompt.fit_prompt`` as ``core.generation.qa`` builds it.

Each pair is a first question, then a different second one (a follow-up: another
question, other sources); the second question's time to first token is what a person
waits for, together with the server's own count of prompt tokens read anew and reused
from its cache. Pairs run in ABAB order (before, after, before, after, ...). Sources are
retrieved once per question from a Library over SQuAD paragraphs, so both layouts send
the very same passages. Answers are cut at ``--predict`` tokens (1 by default, the same
for both): the first token does not depend on it, and on a shared 2-core machine the
server wrote 1-2 tokens a second, so whole answers would only make the run far longer.

    .venv/bin/python bench/ttft.py             # 5 pairs
    .venv/bin/python bench/ttft.py --pairs 8

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.llm_server import LLMServer
from bench.record import emit
from core.config import Settings
from core.embedding.models import load_embedder
from core.generation.prompt import (
    ANSWER_TOKENS,
    MIN_ANSWER_TOKENS,
    SYSTEM_MESSAGE,
    fit_prompt,
    new_tag,
)
from core.generation.qa import _dates
from core.library import Library
from core.llm import OpenAICompatClient
from core.records import Hit

SQUAD = Path("/work/shared/data/squad-small/squad_small.json")
PARAGRAPHS_PER_ARTICLE = 12
LAYOUTS = ("before", "after")


def write_paragraphs(folder: Path) -> list[tuple[str, str]]:
    """A few SQuAD paragraphs as text files; their answerable questions, per article."""
    squad = json.loads(SQUAD.read_text(encoding="utf-8"))
    questions: list[tuple[str, str]] = []
    for article in squad["data"]:
        for i, paragraph in enumerate(article["paragraphs"][:PARAGRAPHS_PER_ARTICLE]):
            (folder / f"{article['title'].lower()}-{i:02}.txt").write_text(
                f"{article['title']}\n\n{paragraph['context']}\n", encoding="utf-8"
            )
            for qa in paragraph["qas"]:
                if qa.get("answers") and not qa.get("is_impossible"):
                    questions.append((article["title"], str(qa["question"]).strip()))
    return questions


def pick_pairs(questions: Sequence[tuple[str, str]], pairs: int) -> list[tuple[str, str]]:
    """Pairs of questions about different articles: the second needs other sources."""
    by_article: dict[str, list[str]] = {}
    for title, question in questions:
        by_article.setdefault(title, []).append(question)
    first, second = list(by_article.values())[:2]
    # Spread over each article's questions, so the pairs do not all ask one paragraph.
    step_a, step_b = max(1, len(first) // pairs), max(1, len(second) // pairs)
    return [(first[i * step_a], second[i * step_b]) for i in range(pairs)]


def before_messages(after: Sequence[dict[str, str]], tag: str) -> list[dict[str, str]]:
    """The old layout of the same request: the tag opens the system message."""
    user = after[1]["content"]
    line = f"Request tag: {tag}\n\n"
    assert user.startswith(line), user[:80]
    return [
        {"role": "system", "content": f"Request tag: {tag}.\n" + SYSTEM_MESSAGE},
        {"role": "user", "content": user[len(line) :]},
    ]


def send(
    client: OpenAICompatClient, model: str, messages: Sequence[dict[str, str]], predict: int
) -> dict[str, Any]:
    """One request: seconds to its first token and the server's prompt counts."""
    started = time.perf_counter()
    first: float | None = None
    final = None
    for delta in client.chat(
        model, messages, num_predict=predict, temperature=Settings().answer_temperature
    ):
        # The first record after the prompt is read: a token, or the end when the one
        # token allowed had no text of its own.
        if not delta.is_wait and first is None:
            first = time.perf_counter() - started
        if delta.done:
            final = delta
    assert final is not None and first is not None, "the server wrote nothing"
    return {
        "first_token_s": round(first, 4),
        "prompt_eval_count": final.prompt_eval_count,
        "prompt_read": final.prompt_read,
        "prompt_cached": final.prompt_cached,
    }


def median(values: Sequence[float | int | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return round(statistics.median(present), 4) if present else None


def ratio(after: float | None, before: float | None) -> float | None:
    return round(after / before, 4) if after is not None and before else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5, help="question pairs per layout")
    parser.add_argument("--predict", type=int, default=1, help="answer tokens per request")
    parser.add_argument("--ctx", type=int, default=4096, help="the server's context size")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")

    with tempfile.TemporaryDirectory(prefix="lectern-ttft-") as tmp:
        docs = Path(tmp) / "docs"
        docs.mkdir()
        questions = write_paragraphs(docs)
        pairs = pick_pairs(questions, args.pairs)
        settings = Settings(home=Path(tmp) / "home")
        with Library(settings, embedder=load_embedder()) as library:
            library.index([docs])
            hits: dict[str, list[Hit]] = {
                q: library.search(q, k=settings.top_k) for pair in pairs for q in pair
            }
            dates = {q: _dates(library, found) for q, found in hits.items()}
            with LLMServer(ctx=args.ctx) as server:
                client = OpenAICompatClient(server.url, prompt_timeout=600.0)
                try:
                    result = run_pairs(client, pairs, hits, dates, args.predict)
                finally:
                    client.close()
    result["pairs"] = args.pairs
    result["predict"] = args.predict
    result["server_ctx"] = args.ctx
    emit("ttft", result)
    return 0


def run_pairs(
    client: OpenAICompatClient,
    pairs: Sequence[tuple[str, str]],
    hits: dict[str, list[Hit]],
    dates: dict[str, dict[str, str]],
    predict: int,
) -> dict[str, Any]:
    model = client.served_model("default")
    context_length = client.context_length(model)
    # As core.generation.qa._fit sizes the answer for a server with a fixed context.
    answer_tokens = ANSWER_TOKENS
    if context_length:
        answer_tokens = min(ANSWER_TOKENS, max(MIN_ANSWER_TOKENS, context_length // 4))

    def messages(question: str, layout: str) -> list[dict[str, str]]:
        prompt = fit_prompt(
            question,
            hits[question],
            context_length=context_length,
            sets_num_ctx=client.sets_num_ctx,
            dates=dates[question],
            answer_tokens=answer_tokens,
            tag=new_tag(),
        )
        after = [dict(m) for m in prompt.messages]
        return after if layout == "after" else before_messages(after, prompt.tag)

    # One request first, so loading and first-call costs fall on neither layout.
    send(client, model, messages(pairs[0][0], "after"), predict)
    rows: list[dict[str, Any]] = []
    for number, (first, second) in enumerate(pairs, start=1):
        for layout in LAYOUTS:  # ABAB
            opening = send(client, model, messages(first, layout), predict)
            follow = send(client, model, messages(second, layout), predict)
            rows.append({"pair": number, "layout": layout, "first": opening, "second": follow})
            print(
                f"pair {number} {layout:6}: second question {follow['first_token_s']:.3f} s to "
                f"first token, {follow['prompt_read']} tokens read, "
                f"{follow['prompt_cached']} cached",
                file=sys.stderr,
                flush=True,
            )
    return {"model": model, "context_length": context_length, **summarise(rows), "runs": rows}


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians per layout, their ratio, and the median of each pair's own ratio: the two
    layouts of a pair ran back to back, so the load of a shared machine, which drifts over
    minutes, weighs on both alike."""
    summary: dict[str, dict[str, float | None]] = {}
    for layout in LAYOUTS:
        seconds = [r["second"] for r in rows if r["layout"] == layout]
        summary[layout] = {
            "second_first_token_s": median([s["first_token_s"] for s in seconds]),
            "second_prompt_read": median([s["prompt_read"] for s in seconds]),
            "second_prompt_cached": median([s["prompt_cached"] for s in seconds]),
            "second_prompt_eval_count": median([s["prompt_eval_count"] for s in seconds]),
            "first_first_token_s": median(
                [r["first"]["first_token_s"] for r in rows if r["layout"] == layout]
            ),
        }
    by_pair: dict[int, dict[str, float]] = {}
    for r in rows:
        by_pair.setdefault(r["pair"], {})[r["layout"]] = r["second"]["first_token_s"]
    paired = [
        p["after"] / p["before"] for p in by_pair.values() if p.get("before") and "after" in p
    ]
    before, after = summary["before"], summary["after"]
    return {
        "median": summary,
        "ratio_after_before": {
            "second_first_token_s": ratio(
                after["second_first_token_s"], before["second_first_token_s"]
            ),
            "second_first_token_s_per_pair": median(paired),
            "second_prompt_read": ratio(after["second_prompt_read"], before["second_prompt_read"]),
        },
    }


if __name__ == "__main__":
    sys.exit(main())
