"""The reader of ``et_cuda_run --json``: one JSON object per line, ``"kind"`` first
(``case``, ``bench``, ``bench-wait``, ``bench-lib``, ``bench-wait-lib``, ``generate``,
``generate-lib``; runner/json.h). Lines that are not JSON objects (log lines, upstream's
``PyTorchObserver {...}``) are skipped, so stdout and stderr may be read together.

  python3 runner_json.py brief LOG [KIND ...]   a log's records of these kinds (default: all), one
                                                "kind: key=value ..." line each (text_fields' strings,
                                                the token lists left out), for the scripts' progress lines
"""

import json
import sys


def record(line):
    """The JSON object of one line, or None (not an object line, or no ``"kind"``)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("kind"), str) else None


def records(text):
    """Every JSON object line of ``text``, in order, as dicts."""
    return [r for r in map(record, text.splitlines()) if r is not None]


# The text lines' precision per figure (runner/generate.cpp), for text_fields.
_TEXT_FORMAT = {"ttft_ms": "%.3f", "prefill_tok_s": "%.1f", "decode_tok_s": "%.1f", "host_waits_per_token": "%.2f",
                "sampling_us_per_token": "%.1f", "lib_execute_us": "%.2f", "run_us": "%.2f"}


def text_fields(rec):
    """A record's fields as the text line's ``key=value`` strings (lists joined by commas,
    null as n/a, no expected tokens as none, figures at the text line's precision), so that a
    reader of older text logs reads both the same way."""
    out = {}
    for k, v in rec.items():
        if k == "kind":
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k in _TEXT_FORMAT:
            out[k] = _TEXT_FORMAT[k] % v
        elif isinstance(v, list):
            out[k] = ",".join(str(x) for x in v)
        elif v is None:
            out[k] = "none" if k == "expected" else "n/a"
        elif isinstance(v, bool):
            out[k] = "true" if v else "false"
        else:
            out[k] = str(v)
    return out


def of_kind(text, kind, **match):
    """The records of ``kind`` whose fields equal ``match`` (``method="forward"``, say)."""
    return [r for r in records(text)
            if r["kind"] == kind and all(r.get(k) == v for k, v in match.items())]


def last(text, kind, **match):
    """The last such record (a token loop's steady round is its last), or None."""
    found = of_kind(text, kind, **match)
    return found[-1] if found else None


def brief(rec):
    """One short line about a record: ``kind: key=value ...`` without the token lists."""
    fields = text_fields(rec)
    return rec["kind"] + ": " + " ".join(f"{k}={v}" for k, v in fields.items() if k not in ("tokens", "expected"))


def main(argv):
    if len(argv) < 2 or argv[0] != "brief":
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(argv[1], errors="replace") as f:
            text = f.read()
    except OSError as e:
        print(f"runner_json.py: {e}", file=sys.stderr)
        return 1
    kinds = set(argv[2:])
    for rec in records(text):
        if not kinds or rec["kind"] in kinds:
            print(brief(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
