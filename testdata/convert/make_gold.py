#!/usr/bin/env python3
"""Summarise a GGUF file written by llama.cpp's convert_hf_to_gguf.py as gold JSON.

Usage: PYTHONPATH=<llama.cpp>/gguf-py python make_gold.py IN.gguf OUT.gold.json

Metadata keys are listed in file order with their GGUF type; scalars and
strings are given as values, arrays as {"len", "sha256"} where the hash is
over the array's serialized GGUF payload (numeric: the little-endian
elements; strings: u64 length + bytes per element). Tensors are listed in
file order with type name, GGUF shape (ne0 first) and SHA-256 of their data.
"""
import hashlib
import json
import sys

from gguf import GGUFReader, GGUFValueType


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    meta = []
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        t = GGUFValueType(f.types[0])
        entry = {"key": f.name, "type": t.name}
        if t == GGUFValueType.ARRAY:
            payload = b"".join(p.tobytes() for p in f.parts[5:])
            entry["elem_type"] = GGUFValueType(f.types[1]).name
            entry["len"] = len(f.data)
            entry["sha256"] = hashlib.sha256(payload).hexdigest()
        elif t == GGUFValueType.STRING:
            entry["value"] = bytes(f.parts[f.data[0]]).decode("utf-8")
        else:
            v = f.parts[f.data[0]][0]
            entry["value"] = bool(v) if t == GGUFValueType.BOOL else v.item()
        meta.append(entry)
    tensors = []
    for t in r.tensors:
        tensors.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(x) for x in t.shape],
            "sha256": hashlib.sha256(t.data.tobytes()).hexdigest(),
        })
    with open(dst, "w", encoding="utf-8") as fp:
        json.dump({"source": "llama.cpp convert_hf_to_gguf.py", "metadata": meta, "tensors": tensors}, fp, indent=1, ensure_ascii=False)
        fp.write("\n")


if __name__ == "__main__":
    main()
