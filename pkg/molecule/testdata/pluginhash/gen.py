#!/usr/bin/env python3
"""Generate the PluginHash test vectors with real CPython.

The hash is molecule-sdk-python's verify_plugin_sha256 content manifest
(molecule_agent/client.py @9622f0b): every file under the plugin directory
(pathlib rglob + is_file, relative path as_posix), sorted by path, the
top-level "plugin.yaml" left out, as a list of (path, sha256-hex) pairs,
serialised with json.dumps(pairs, sort_keys=True) (default separators,
ensure_ascii=True), sha256 of the encoded bytes, hex.

Each case is built on disk in a temporary directory and hashed exactly that
way. Paths are given as text, or as hex bytes ("path_hex") for names that
are not valid UTF-8 (Python decodes them with surrogateescape). Contents
are text ("content", UTF-8) or hex bytes ("content_hex").

Run:  python3 gen.py > vectors.json
"""
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

CASES = [
    {"name": "empty plugin (only plugin.yaml)",
     "files": [{"path": "plugin.yaml", "content": "name: empty\n"}]},
    {"name": "no files at all", "files": []},
    {"name": "single file",
     "files": [{"path": "plugin.yaml", "content": "name: ok\nversion: 1.0\n"},
               {"path": "rules.md", "content": "- be kind\n"}]},
    {"name": "nested dirs, nested plugin.yaml included, top-level excluded",
     "files": [{"path": "plugin.yaml", "content": "name: nested\nsha256: x\n"},
               {"path": "a/b/c/deep.txt", "content": "deep content"},
               {"path": "sub/plugin.yaml", "content": "name: inner\n"},
               {"path": "skills/example-skill/SKILL.md", "content": "# Skill\n"},
               {"path": "z_last.txt", "content": "z"},
               {"path": "A_upper.txt", "content": "A"},
               {"path": ".hidden/dotfile", "content": "hidden"},
               {"path": "empty.txt", "content": ""}],
     "dirs": ["empty-dir", "a/b/empty"]},
    {"name": "non-ASCII names (BMP and astral, escaped as \\uXXXX and surrogate pairs)",
     "files": [{"path": "plugin.yaml", "content": "name: unicode\n"},
               {"path": "caf\u00e9.md", "content": "caf\u00e9 au lait\n"},
               {"path": "\u6587\u6863/\u8bf4\u660e.txt", "content": "\u8bf4\u660e"},
               {"path": "emoji-\U0001F600.txt", "content": "grin"},
               {"path": "\u00e9/inner.txt", "content": "e-acute dir"},
               {"path": "e\u0301.txt", "content": "combining"},
               {"path": "\ue000-private.txt", "content": "private use"},
               {"path": "\ud7ff.txt", "content": "last before surrogates"}]},
    {"name": "JSON-special characters in names",
     "files": [{"path": 'quote".txt', "content": "q"},
               {"path": "back\\slash.txt", "content": "b"},
               {"path": "new\nline.txt", "content": "n"},
               {"path": "tab\there.txt", "content": "t"},
               {"path": "ctl\x01\x1f\x7f.txt", "content": "c"},
               {"path": "cr\r-bs\b-ff\f.txt", "content": "r"},
               {"path": "slash/and space.txt", "content": "s"},
               {"path": "<tag>&amp;'apos'.txt", "content": "h"}]},
    {"name": "binary contents",
     "files": [{"path": "blob.bin", "content_hex": "00ff10807f"},
               {"path": "plugin.yaml", "content_hex": "ffff"}]},
    {"name": "name that is not valid UTF-8 (surrogateescape) sorts by code point, not by byte",
     "files": [{"path_hex": "78802e747874", "content": "x + byte 0x80 = U+DC80"},
               {"path": "x\ud7ff.txt", "content": "U+D7FF sorts before U+DC80"},
               {"path": "x\ue000.txt", "content": "U+E000 sorts after U+DC80"},
               {"path": "plain.txt", "content": "plain"}]},
]


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(65536), b""):
            h.update(chunk)
    return h.hexdigest()


def _walk_files(root: Path) -> list:
    rel = []
    for p in root.rglob("*"):
        if p.is_file():
            rel.append(p.relative_to(root).as_posix())
    return rel


def manifest(plugin_dir: Path) -> str:
    file_hashes = []
    for relpath in sorted(_walk_files(plugin_dir)):
        if relpath == "plugin.yaml":
            continue
        file_hashes.append((relpath, _sha256_file(plugin_dir / relpath)))
    return json.dumps(file_hashes, sort_keys=True)


def path_bytes(f) -> bytes:
    if "path_hex" in f:
        return bytes.fromhex(f["path_hex"])
    return f["path"].encode("utf-8")


def content_bytes(f) -> bytes:
    if "content_hex" in f:
        return bytes.fromhex(f["content_hex"])
    return f.get("content", "").encode("utf-8")


def main() -> None:
    out = []
    for case in CASES:
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            broot = os.fsencode(d)
            for sub in case.get("dirs", []):
                os.makedirs(os.path.join(broot, sub.encode("utf-8")), exist_ok=True)
            files = []
            for f in case["files"]:
                p = path_bytes(f)
                full = os.path.join(broot, p)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "wb") as fh:
                    fh.write(content_bytes(f))
                files.append({"path_hex": p.hex(), "content_hex": content_bytes(f).hex()})
            m = manifest(root)
            out.append({
                "name": case["name"],
                "dirs": case.get("dirs", []),
                "files": files,
                "manifest": m,
                "sha256": hashlib.sha256(m.encode()).hexdigest(),
            })
    json.dump({"generator": "gen.py", "python": sys.version.split()[0], "vectors": out},
              sys.stdout, indent=1, ensure_ascii=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
