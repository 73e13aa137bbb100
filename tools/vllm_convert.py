"""make vllm: a registry GGUF as a Hugging Face folder that vLLM can serve (issue 28), made once.

    python tools/vllm_convert.py GGUF CACHE     (run by the vLLM environment's python)

vLLM 0.32 has no in-tree GGUF loader, so the GGUF is converted with transformers: its GGUF reader
de-quantizes every tensor to float32 (``from_pretrained(dir, gguf_file=...)``, which needs the
``gguf`` package), the GGUF's quantization record is dropped from the config, and the state dict
is loaded into a fresh model of the same class, which ``save_pretrained`` writes as safetensors
beside the tokenizer transformers read from the same file. That tokenizer is given the GGUF's own
``tokenizer.ggml.add_bos_token`` (transformers 5.19 drops it: Gemma 3's converted tokenizer added no
BOS, so vLLM's ``/tokenize`` did not either, and ctxlite's parity check refused the server), and is
checked after saving to add BOS exactly when the GGUF says so. The served weights are therefore the
GGUF's quantized values exactly, in float32: vLLM and a transformers reference on this folder
compute with the same numbers, llama.cpp on the GGUF with quantized kernels (docs/servers.md).

The folder is ``CACHE/<sha256 of the GGUF>``, written under a temporary name and renamed when
complete (with ``converted.json`` naming its source and this tool's ``CONVERTER`` version), so a
second run only hashes the file and prints the folder; a changed GGUF gets a folder of its own, and
a folder an older version of this tool made is made again. Prints the folder on stdout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

MARK = "converted.json"
CONVERTER = 2
"""This tool's version: raise it when what it writes changes (2: the GGUF's add-BOS flag kept)."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def convert(gguf: Path, out: Path) -> dict:
    """Write ``gguf`` as a float32 Hugging Face folder ``out``; what was made (for ``converted.json``)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.monotonic()
    where = {"pretrained_model_name_or_path": str(gguf.parent), "gguf_file": gguf.name}
    tokenizer = AutoTokenizer.from_pretrained(**where)
    add_bos = _gguf_flag(gguf, "tokenizer.ggml.add_bos_token")
    if add_bos is not None:
        tokenizer.add_bos_token = add_bos
    loaded = AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # the GGUF's; the folder holds plain float32 tensors
        del config.quantization_config
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    saved = AutoTokenizer.from_pretrained(out)
    adds = saved("x").input_ids[:1] == [saved.bos_token_id]
    if add_bos is not None and adds != add_bos:
        raise SystemExit(
            f"vllm_convert: the saved tokenizer {'adds' if adds else 'does not add'} BOS, the GGUF says {add_bos}"
        )
    return {
        "architecture": type(model).__name__,
        "dtype": "float32",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seconds": round(time.monotonic() - start, 1),
    }


def _gguf_flag(gguf: Path, key: str) -> bool | None:
    """A boolean of the GGUF's metadata, or None where it has no such key."""
    from gguf import GGUFReader

    field = GGUFReader(gguf).fields.get(key)
    return None if field is None else bool(field.parts[field.data[0]][0])


def _converted(out: Path) -> bool:
    try:
        return json.loads((out / MARK).read_text(encoding="utf-8")).get("converter") == CONVERTER
    except (OSError, ValueError):
        return False


def main(gguf: str, cache: str) -> None:
    source = Path(gguf).resolve()
    if not gguf or not source.is_file():
        sys.exit(f"vllm_convert: no GGUF file at {gguf!r}")
    sha = sha256_file(source)
    out = Path(cache) / sha
    if not _converted(out):
        partial = out.with_name(f"{sha}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        made = convert(source, partial)
        mark = {"gguf": source.name, "sha256": sha, "size_bytes": source.stat().st_size, "converter": CONVERTER, **made}
        (partial / MARK).write_text(json.dumps(mark, indent=1) + "\n", encoding="utf-8")
        shutil.rmtree(out, ignore_errors=True)  # an incomplete folder of an older tool
        os.replace(partial, out)
        print(f"converted {source.name} in {made['seconds']} s", file=sys.stderr)
    print(out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tools/vllm_convert.py GGUF CACHE")
    main(sys.argv[1], sys.argv[2])
