"""The checker's full reports, key for key and in the same order, as the one-class checker gave
them before it became composed parts (tests/checker_cases.py: the runs; tests/data/
checker_golden.jsonl.gz: their reports, written by main's one-class checker at e4e97ac)."""

import gzip
import json
from pathlib import Path

from checker_cases import all_cases, canonical

GOLDEN = Path(__file__).parent / "data" / "checker_golden.jsonl.gz"


def golden():
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_every_report_is_the_one_the_checker_gave_before(tmp_path):
    expected = golden()
    got = list(all_cases(tmp_path))
    assert [name for name, _ in got] == [d["case"] for d in expected]
    assert len(got) > 150  # every protocol twice or three times over, the streams, the figures
    for (name, report), want in zip(got, expected):
        # text against text: the same keys, values and order (the JSON of what --json prints)
        assert canonical(report) == json.dumps(want["report"]), name
