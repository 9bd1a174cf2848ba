"""The reader of ``et_cuda_run --json``: one JSON object per line, ``"kind"`` first
(``case``, ``bench``, ``bench-wait``, ``bench-lib``, ``bench-wait-lib``, ``generate``,
``generate-lib``; runner/json.h). Lines that are not JSON objects (log lines, upstream's
``PyTorchObserver {...}``) are skipped, so stdout and stderr may be read together."""

import json


def records(text):
    """Every JSON object line of ``text``, in order, as dicts."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("kind"), str):
            out.append(rec)
    return out


def of_kind(text, kind, **match):
    """The records of ``kind`` whose fields equal ``match`` (``method="forward"``, say)."""
    return [r for r in records(text)
            if r["kind"] == kind and all(r.get(k) == v for k, v in match.items())]


def last(text, kind, **match):
    """The last such record (a token loop's steady round is its last), or None."""
    found = of_kind(text, kind, **match)
    return found[-1] if found else None
