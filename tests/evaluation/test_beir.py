"""`lectern eval` over several BEIR-format sets in one run (real files, model, DuckDB)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import retrieval_multilingual as bench
from core.cli.main import main

DOCS = {
    "d1": ("Glaciers", "Stakes drilled into the ice cap show how far the glacier retreated."),
    "d2": ("Tides", "Tide tables list the high and low water at each harbour."),
    "d3": ("Bread", "A sourdough starter needs flour, water and a warm kitchen."),
    "d4": ("Volcanoes", "Lava from the eruption flowed down the eastern slope for a week."),
}
SPLITS = {
    "test": [("q1", "how far did the glacier retreat", "d1"), ("q2", "high water", "d2")],
    "train": [("q3", "what does a sourdough starter need", "d3")],
}


def _beir(folder: Path, prefix: str) -> Path:
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as out:
        for doc_id, (title, text) in DOCS.items():
            out.write(json.dumps({"_id": prefix + doc_id, "title": title, "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as out:
        for rows in SPLITS.values():
            for qid, text, _ in rows:
                out.write(json.dumps({"_id": qid, "text": text}) + "\n")
    for split, rows in SPLITS.items():
        lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{prefix}{d}\t1" for q, _, d in rows]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_eval_runs_several_sets_and_reports_hybrid_against_best_single(
    tmp_path: Path, lectern_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _beir(tmp_path / "set-a", "a")
    b = _beir(tmp_path / "set-b", "b")
    assert main(["eval", "--beir", str(a), "--beir", str(b)]) == 0
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert [s["dataset"] for s in result["sets"]] == ["set-a", "set-b"]
    for summary in result["sets"]:
        by_mode = summary["by_mode"]
        assert set(by_mode) == {"hybrid", "bm25", "dense"}
        assert summary["queries"] == 2
        best = max(by_mode["bm25"]["ndcg@10"], by_mode["dense"]["ndcg@10"])
        assert summary["hybrid_minus_best_single"] == pytest.approx(
            by_mode["hybrid"]["ndcg@10"] - best, abs=1e-4
        )
        assert by_mode["hybrid"]["recall@5"] == 1.0
    assert result["config"]["fusion"] == "adaptive"
    assert "bm25_prior" in result["config"]
    # The human-readable part: a line per set in the summary table, and the configuration.
    assert "hyb-best" in out and "configuration: " in out


def test_eval_train_split_reads_the_train_judgements(
    tmp_path: Path, lectern_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _beir(tmp_path / "set-a", "a")
    assert main(["eval", "--beir", str(a), "--split", "train", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["split"] == "train"
    assert result["sets"][0]["queries"] == 1


def test_the_written_retrieval_sets_are_whole_and_split_into_training_and_checks() -> None:
    """Constants are chosen on the training sets and reported on the checks: a set in both
    lists, or a file in neither, would mix them up; a question pointing at a passage the
    set does not hold would score 0 and pass unnoticed."""
    assert not set(bench.TRAINING_SETS) & set(bench.CHECK_SETS)
    files = {p.stem for p in bench.SETS.glob("*.json")}
    assert files == set(bench.SET_NAMES)
    for name in bench.SET_NAMES:
        data = json.loads((bench.SETS / f"{name}.json").read_text(encoding="utf-8"))
        ids = [doc_id for doc_id, _ in data["documents"]]
        assert len(ids) == len(set(ids)) >= 20, name
        assert [doc_id for doc_id, _ in data["queries"]] == ids, name
        assert all(text.strip() for _, text in data["documents"] + data["queries"]), name
        docs, _ids, queries, gold = bench.load_set(name, 0)
        assert len(queries) == len(gold) == len(ids) and max(gold) < len(docs), name
