"""Prompt choices measured, not assumed: each is kept or dropped by the answer eval.

Four choices of how an answer's prompt is built (settings ``source_order``,
``source_dates`` / ``prefer_newest``, ``source_excerpts`` and ``followup_rewrite``), each run through
``lectern eval --answers``'s own code against a real model on loopback (llama.cpp with
SmolLM2-135M-Instruct from bench/llm_server.py, or any server given with --url), at
temperature 0 so that two variants differ only by their prompt:

* **source order** on SQuAD's Normans article (the article the project tunes on; the
  other one stays held out): [1] = most relevant placed first ("relevance") or the best
  two at both ends of the list ("edges");
* **dates** on a conflict set written here: pairs of files that disagree on a fact, one
  dated later than the other (file modification times), and the question whose right
  answer is the newer file's: dates in the source markers or not, and the rule "prefer
  the latest date when sources disagree" or not;
* **excerpts** on the same article: a long passage sent as its sentences around what the
  question matches, or whole (the figures say the tokens the server read, the answers
  right, and the model's own text alone before the quote-first rule);
* **follow-up rewrite** on bench/answer_sets/squad_followups.jsonl (follow-ups written on
  the Normans article: "Who was Herve?" then "When did he serve as a Byzantine
  general?"): the model rewrites the follow-up, or the previous question's terms are
  added ("keywords"). The earlier question is answered without the model, so that each
  follow-up costs one model answer.

A variant is kept over the default only when it answers more questions right; a tie keeps
the default (the simpler prompt). The figures for one small model decide nothing for
every model, so the settings stay open to change.

Usage: .venv/bin/python bench/prompt_choices.py [--limit 30] [--url http://.../v1]
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.llm_server import LLMServer  # noqa: E402
from bench.record import emit  # noqa: E402
from core.config import Settings  # noqa: E402
from core.evaluation.answers import evaluate_answers  # noqa: E402

SQUAD = ROOT.parent / "shared" / "data" / "squad-small" / "squad_small.json"
FOLLOWUPS = ROOT / "bench" / "answer_sets" / "squad_followups.jsonl"

# Pairs of documents that disagree, each (older date, older text, newer date, newer
# text), and the question; the answer is the newer text's value. Written for this bench.
CONFLICTS: list[tuple[str, str, str, str, str, str, str, str]] = [
    # name, old date, old text, new date, new text, question, new answer, old answer
    (
        "travel-policy",
        "2021-03-02",
        "Travel policy. The daily meal allowance for staff travelling on company business "
        "is 40 euros. Receipts are needed for every meal.",
        "2024-06-11",
        "Travel policy. The daily meal allowance for staff travelling on company business "
        "is 55 euros. Receipts are needed for every meal.",
        "What is the daily meal allowance when travelling?",
        "55 euros",
        "40 euros",
    ),
    (
        "wifi",
        "2022-01-15",
        "Office network. The guest wifi network is called Harbour-Guest and its password "
        "is changed every month by the front desk.",
        "2025-02-03",
        "Office network. The guest wifi network is called Lighthouse-Visitors and its "
        "password is changed every month by the front desk.",
        "What is the guest wifi network called?",
        "Lighthouse-Visitors",
        "Harbour-Guest",
    ),
    (
        "gym",
        "2020-09-01",
        "Membership terms. The gym opens at 6:30 on weekdays and closes at 22:00. Members "
        "may bring one guest a month.",
        "2023-09-01",
        "Membership terms. The gym opens at 5:45 on weekdays and closes at 22:00. Members "
        "may bring one guest a month.",
        "What time does the gym open on weekdays?",
        "5:45",
        "6:30",
    ),
    (
        "landlord",
        "2019-11-20",
        "Tenancy contact sheet. Repairs are reported to the building manager, Petra "
        "Lindqvist, by phone or by email.",
        "2024-01-08",
        "Tenancy contact sheet. Repairs are reported to the building manager, Tomasz "
        "Wierzbicki, by phone or by email.",
        "Who is the building manager for repairs?",
        "Tomasz Wierzbicki",
        "Petra Lindqvist",
    ),
    (
        "insurance",
        "2021-05-30",
        "Car insurance summary. The excess for a windscreen claim is 150 pounds. Claims "
        "are made through the insurer's phone line.",
        "2024-05-30",
        "Car insurance summary. The excess for a windscreen claim is 95 pounds. Claims "
        "are made through the insurer's phone line.",
        "How much is the excess for a windscreen claim?",
        "95 pounds",
        "150 pounds",
    ),
    (
        "school",
        "2022-08-25",
        "School letter. Pupils are dropped off at the north gate from 8:10, and the "
        "school day starts at 8:40.",
        "2025-08-22",
        "School letter. Pupils are dropped off at the east gate from 8:10, and the school "
        "day starts at 8:40.",
        "At which gate are pupils dropped off?",
        "east gate",
        "north gate",
    ),
    (
        "recipe",
        "2018-12-01",
        "Grandmother's bread. Bake the loaf at 200 degrees for 35 minutes, then let it cool "
        "on a rack.",
        "2023-12-01",
        "Grandmother's bread. Bake the loaf at 220 degrees for 30 minutes, then let it cool "
        "on a rack.",
        "At what temperature is the bread baked?",
        "220 degrees",
        "200 degrees",
    ),
    (
        "vpn",
        "2021-10-10",
        "IT guide. To work from home, connect with the VPN client to the server "
        "gw1.example.org using your staff account.",
        "2025-04-14",
        "IT guide. To work from home, connect with the VPN client to the server "
        "remote.example.org using your staff account.",
        "Which server does the VPN client connect to?",
        "remote.example.org",
        "gw1.example.org",
    ),
    (
        "club",
        "2020-02-14",
        "Chess club notes. The club meets on Tuesday evenings in the library's upstairs room.",
        "2024-02-14",
        "Chess club notes. The club meets on Thursday evenings in the library's upstairs room.",
        "On which evening does the chess club meet?",
        "Thursday",
        "Tuesday",
    ),
    (
        "pension",
        "2019-04-06",
        "Pension statement. Your employer pays in 5 percent of your salary each month.",
        "2024-04-06",
        "Pension statement. Your employer pays in 7 percent of your salary each month.",
        "What percentage of salary does the employer pay into the pension?",
        "7 percent",
        "5 percent",
    ),
    (
        "vet",
        "2022-03-03",
        "Pet record. Biscuit's vaccinations are done at the Riverside Veterinary Clinic.",
        "2025-03-03",
        "Pet record. Biscuit's vaccinations are done at the Hillcrest Animal Hospital.",
        "Where are Biscuit's vaccinations done?",
        "Hillcrest Animal Hospital",
        "Riverside Veterinary Clinic",
    ),
    (
        "deadline",
        "2023-01-09",
        "Project plan. The final report is due to the funder on 30 September.",
        "2025-01-09",
        "Project plan. The final report is due to the funder on 15 November.",
        "When is the final report due to the funder?",
        "15 November",
        "30 September",
    ),
]


def write_conflicts(folder: Path) -> Path:
    """The conflict documents (with their dates as modification times) and questions."""
    docs = folder / "conflict-docs"
    docs.mkdir(parents=True, exist_ok=True)
    lines = []
    for index, (name, old_date, old, new_date, new, question, answer, _) in enumerate(CONFLICTS):
        # Which file is newer alternates, so that neither name nor position tells it.
        first, second = ("a", "b") if index % 2 else ("b", "a")
        for suffix, date, text in ((first, old_date, old), (second, new_date, new)):
            path = docs / f"{name}-{suffix}.txt"
            path.write_text(text + "\n", encoding="utf-8")
            stamp = datetime.fromisoformat(date).timestamp()
            os.utime(path, (stamp, stamp))
        lines.append(json.dumps({"question": question, "answers": [answer]}))
    questions = folder / "conflicts.jsonl"
    questions.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return questions


VARIANTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "source_order": [("relevance", {}), ("edges", {"source_order": "edges"})],
    "dates": [
        ("dates", {}),
        ("dates, prefer newest", {"prefer_newest": True}),
        ("no dates", {"source_dates": False}),
    ],
    "followup_rewrite": [("model", {}), ("keywords", {"followup_rewrite": "keywords"})],
    # The tie rule keeps the default here too: the excerpts, the smaller prompt.
    "source_excerpts": [("excerpts", {}), ("whole passages", {"source_excerpts": False})],
}


def _figures(report: dict[str, Any]) -> dict[str, Any]:
    llm = report["modes"]["llm"]
    if "error" in llm:
        return {"error": llm["error"]}
    groups = llm["groups"]
    out: dict[str, Any] = {
        "answer_modes": llm["answer_modes"],
        "s_per_q": llm["seconds_per_question"],
    }
    for group in ("answerable", "unanswerable", "all"):
        if group in groups and groups[group].get("questions"):
            g = groups[group]
            out[group] = {
                "questions": g["questions"],
                "correct": g.get("correct"),
                "model_alone_correct": g.get("model_alone_correct"),
                "quoted_first": g.get("quoted_first"),
                "declined_or_warned": g.get("declined_or_warned"),
                "cited_precision": g.get("citation_precision"),
                "prompt_tokens_p50": (g.get("prompt_tokens") or {}).get("p50"),
                "first_token_s_p50": (g.get("first_token_s") or {}).get("p50"),
            }
    return out


def _right(figures: dict[str, Any]) -> float:
    answered = figures.get("all") or figures.get("answerable") or {}
    return float(answered.get("correct") or 0.0)


@contextlib.contextmanager
def _server(url: str | None, threads: int) -> Iterator[str]:
    if url:
        yield url
        return
    with LLMServer(ctx=4096, threads=threads) as server:
        yield server.url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=30, help="SQuAD questions (first N)")
    parser.add_argument("--url", help="an OpenAI-compatible server's /v1 URL (default: start one)")
    parser.add_argument("--model", default="SmolLM2-135M-Instruct.Q4_1")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=sorted(VARIANTS), action="append")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=192,
        help="answer length cap for every variant (a 135M model at temperature 0 can "
        "repeat itself to the cap)",
    )
    args = parser.parse_args(argv)

    started = time.monotonic()
    results: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="lectern-prompts-") as tmp,
        _server(args.url, args.threads) as url,
    ):
        base = Settings(
            home=Path(tmp) / "home",
            llm_kind="openai",
            llm_url=url,
            llm_model=args.model,
            answer_temperature=0.0,
            answer_max_tokens=args.max_tokens,
        )
        conflicts = write_conflicts(Path(tmp))
        squad_scratch = Path(tmp) / "squad"
        runs = {
            "source_order": lambda s: evaluate_answers(
                SQUAD, modes=("llm",), limit=args.limit, settings=s, scratch=squad_scratch
            ),
            "dates": lambda s: evaluate_answers(
                conflicts,
                documents=Path(tmp) / "conflict-docs",
                modes=("llm",),
                settings=s,
                scratch=Path(tmp) / "conflicts",
            ),
            # The follow-ups ask about the paragraphs the SQuAD run wrote.
            "source_excerpts": lambda s: evaluate_answers(
                SQUAD, modes=("llm",), limit=args.limit, settings=s, scratch=squad_scratch
            ),
            "followup_rewrite": lambda s: evaluate_answers(
                FOLLOWUPS,
                documents=squad_scratch / "docs",
                modes=("llm",),
                limit=args.limit,
                settings=s,
                scratch=Path(tmp) / "followups",
            ),
        }
        if "followup_rewrite" in (args.only or VARIANTS) and not (squad_scratch / "docs").exists():
            evaluate_answers(SQUAD, modes=("none",), limit=1, settings=base, scratch=squad_scratch)
        for choice, variants in VARIANTS.items():
            if args.only and choice not in args.only:
                continue
            figures = {}
            for name, changes in variants:
                t0 = time.monotonic()
                report = runs[choice](replace(base, **changes))
                figures[name] = _figures(report)
                print(
                    f"{choice} / {name}: {json.dumps(figures[name])} ({time.monotonic() - t0:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
            default = variants[0][0]
            best = max(figures, key=lambda n: (_right(figures[n]), n == default))
            results[choice] = {"variants": figures, "default": default, "best": best}
    emit(
        "prompt_choices",
        {
            "bench": "prompt_choices",
            "model": args.model,
            "temperature": 0.0,
            "max_tokens": args.max_tokens,
            "squad_questions": args.limit,
            "conflict_questions": len(CONFLICTS),
            "elapsed_s": round(time.monotonic() - started, 1),
            "choices": results,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
