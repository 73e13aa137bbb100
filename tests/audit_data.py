"""Small audit inputs the server tests share (tests/server/test_openai_server.py, tests/vllm)."""

from __future__ import annotations

import json
from pathlib import Path


def tiny_audit(tmp: Path) -> tuple[Path, Path]:
    """A two-label format with short records (prompts of a few dozen tokens): the data and format files."""
    records = [("great fun", "good"), ("awful", "bad"), ("loved it", "good"), ("boring", "bad")] * 3
    records += [("so good", "good"), ("dull", "bad"), ("superb", "good"), ("weak", "bad")]
    data = tmp / "tiny.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": l}) + "\n" for t, l in records), encoding="utf-8")
    fmt = tmp / "tiny.toml"
    fmt.write_text(
        'task = "classify"\ninstruction = ""\nrecord = "{text}: {label}\\n"\ninput = "text"\noutput = "label"\n',
        encoding="utf-8",
    )
    return data, fmt
