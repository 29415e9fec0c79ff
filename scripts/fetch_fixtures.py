#!/usr/bin/env python3
"""Fetch upstream vLLM wheels from PyPI and extract the vendored test fixtures.

Stdlib only (Python 3.8+).  For every requested vLLM version this script

1. looks the release up on PyPI's Simple API (PEP 691 JSON form),
2. picks the manylinux x86_64 wheel (the cp311 one where the release has
   per-interpreter wheels, otherwise the abi3 one),
3. downloads it into a cache directory outside the repository (default
   ``/tmp/vllm-wheels``), reusing an already cached file, and verifies its
   sha256 against the digest PyPI publishes,
4. extracts a small site-packages tree into
   ``vendor_fixtures/upstream/vllm-<version>/``:

   - ``vllm/_custom_ops.py``
   - ``vllm/attention/ops/paged_attn.py``
   - ``vllm/attention/ops/prefix_prefill.py``
   - ``vllm/__init__.py``
   - ``vllm/version.py`` and/or ``vllm/_version.py`` (if the wheel has them)
   - ``vllm-<version>.dist-info/METADATA`` (header block only: everything
     after the first blank line -- the long description -- is dropped)

   ``.py`` files are written byte-for-byte as found in the wheel.
5. writes ``vendor_fixtures/provenance.json`` (merged with any entries already
   there for versions not processed in this run), and copies the wheel's
   license file to ``vendor_fixtures/LICENSE-vllm`` if that is not there yet.

Usage::

    python scripts/fetch_fixtures.py [--versions 0.6.3.post1 0.8.3 ...]
                                     [--cache DIR] [--keep-going]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath
from typing import Dict, List, Optional

DEFAULT_VERSIONS = [
    "0.4.3",
    "0.5.5",
    "0.6.3.post1",
    "0.6.6.post1",
    "0.7.3",
    "0.8.3",
    "0.8.5.post1",
    "0.9.2",
    "0.10.1.1",
    "0.11.0",
]

# Required fixture files (a missing one is recorded in provenance.json as such).
REQUIRED_FILES = [
    "vllm/_custom_ops.py",
    "vllm/attention/ops/paged_attn.py",
    "vllm/attention/ops/prefix_prefill.py",
    "vllm/__init__.py",
]
# Optional: extracted when present; absence is recorded too, but is not an error.
OPTIONAL_FILES = [
    "vllm/version.py",
    "vllm/_version.py",
]

SIMPLE_URL = "https://pypi.org/simple/{project}/"
SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json"
USER_AGENT = "vllm-codemod-fetch-fixtures/1.0 (+stdlib urllib)"

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "vendor_fixtures"
UPSTREAM = FIXTURES / "upstream"
PROVENANCE = FIXTURES / "provenance.json"
LICENSE_OUT = FIXTURES / "LICENSE-vllm"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _get(url: str, accept: Optional[str] = None, retries: int = 3):
    headers = {"User-Agent": USER_AGENT}
    if accept:
        headers["Accept"] = accept
    last = None
    for attempt in range(retries):
        try:
            return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120)
        except Exception as exc:  # noqa: BLE001 - retried, then re-raised
            last = exc
            log(f"  GET {url} failed ({exc}); retry {attempt + 1}/{retries}")
            time.sleep(2 * (attempt + 1))
    raise RuntimeError(f"GET {url} failed: {last}")


def fetch_index(project: str = "vllm") -> List[dict]:
    with _get(SIMPLE_URL.format(project=project), accept=SIMPLE_ACCEPT) as resp:
        data = json.load(resp)
    return data["files"]


def pick_wheel(files: List[dict], version: str) -> dict:
    prefix = f"vllm-{version}-"
    cands = [
        f
        for f in files
        if f["filename"].startswith(prefix)
        and f["filename"].endswith(".whl")
        and "x86_64" in f["filename"]
        and "manylinux" in f["filename"]
    ]
    if not cands:
        raise RuntimeError(f"no manylinux x86_64 wheel on PyPI for vllm=={version}")

    def rank(f: dict) -> int:
        fn = f["filename"]
        if "-cp311-cp311-" in fn:
            return 0
        if "-abi3-" in fn:
            return 1
        return 2

    cands.sort(key=rank)
    best = cands[0]
    if rank(best) == 2:
        raise RuntimeError(
            f"no cp311/abi3 manylinux x86_64 wheel for vllm=={version}: "
            + ", ".join(f["filename"] for f in cands)
        )
    return best


def download(entry: dict, cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    dest = cache / entry["filename"]
    want = entry["hashes"]["sha256"]
    if dest.exists():
        got = sha256_file(dest)
        if got == want:
            log(f"  cached: {dest}")
            return dest
        log(f"  cached file has wrong sha256 ({got}); re-downloading")
        dest.unlink()
    size = entry.get("size")
    log(f"  downloading {entry['url']} ({(size or 0) / 1e6:.0f} MB)")
    fd, tmpname = tempfile.mkstemp(dir=str(cache), prefix=".part-", suffix=".whl")
    h = hashlib.sha256()
    done = 0
    t0 = time.time()
    last_report = t0
    try:
        with os.fdopen(fd, "wb") as out, _get(entry["url"]) as resp:
            while True:
                chunk = resp.read(1 << 20)
                if not chunk:
                    break
                out.write(chunk)
                h.update(chunk)
                done += len(chunk)
                now = time.time()
                if now - last_report > 15:
                    last_report = now
                    rate = done / max(now - t0, 1e-6) / 1e6
                    log(f"    {done / 1e6:.0f}/{(size or 0) / 1e6:.0f} MB ({rate:.1f} MB/s)")
        got = h.hexdigest()
        if got != want:
            raise RuntimeError(
                f"sha256 mismatch for {entry['filename']}: got {got}, PyPI says {want}"
            )
        os.replace(tmpname, dest)
    finally:
        if os.path.exists(tmpname):
            os.unlink(tmpname)
    log(f"  ok: sha256 {want} ({time.time() - t0:.0f}s)")
    return dest


def metadata_header(raw: bytes) -> bytes:
    """Return METADATA up to (not including) the first blank line, newline-terminated."""
    text = raw.replace(b"\r\n", b"\n")
    head, sep, _rest = text.partition(b"\n\n")
    return head.rstrip(b"\n") + b"\n"


def find_license(names: List[str], distinfo: str) -> Optional[str]:
    for n in names:
        p = PurePosixPath(n)
        if not n.startswith(distinfo + "/"):
            continue
        if p.name.upper().startswith(("LICENSE", "LICENCE", "COPYING")):
            return n
    return None


def extract(version: str, wheel: Path, entry: dict, out_root: Path) -> dict:
    distinfo = f"vllm-{version}.dist-info"
    target = out_root / f"vllm-{version}"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    rec: Dict[str, object] = {
        "wheel": entry["filename"],
        "url": entry["url"],
        "sha256": entry["hashes"]["sha256"],
        "size": entry.get("size"),
        "files": {},
        "missing": [],
        "missing_optional": [],
    }
    files: Dict[str, dict] = rec["files"]  # type: ignore[assignment]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        nameset = set(names)
        for rel in REQUIRED_FILES + OPTIONAL_FILES:
            if rel not in nameset:
                (rec["missing"] if rel in REQUIRED_FILES else rec["missing_optional"]).append(rel)  # type: ignore[union-attr]
                continue
            data = zf.read(rel)
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            files[rel] = {"sha256": sha256_bytes(data), "size": len(data)}
        md_name = f"{distinfo}/METADATA"
        if md_name in nameset:
            raw = zf.read(md_name)
            cut = metadata_header(raw)
            dest = target / md_name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(cut)
            files[md_name] = {
                "sha256": sha256_bytes(cut),
                "size": len(cut),
                "truncated": (
                    "header block only (long description after the first blank line dropped)"
                ),
                "original_sha256": sha256_bytes(raw),
                "original_size": len(raw),
            }
        else:
            rec["missing"].append(md_name)  # type: ignore[union-attr]
        lic = find_license(names, distinfo)
        if lic:
            data = zf.read(lic)
            rec["license_file"] = {"path": lic, "sha256": sha256_bytes(data)}
            if not LICENSE_OUT.exists():
                LICENSE_OUT.write_bytes(data)
                log(f"  wrote {LICENSE_OUT.relative_to(REPO_ROOT)} from {lic}")
    if rec["missing"]:
        log(f"  MISSING in {entry['filename']}: {rec['missing']}")
    return rec


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--versions", nargs="+", default=DEFAULT_VERSIONS, help="vLLM versions (default: all ten)"
    )
    ap.add_argument(
        "--cache", default="/tmp/vllm-wheels", help="wheel cache dir (outside the repo)"
    )
    ap.add_argument(
        "--keep-going", action="store_true", help="continue with other versions after an error"
    )
    ap.add_argument(
        "--delete-wheels",
        action="store_true",
        help="delete each wheel from the cache after extracting it",
    )
    args = ap.parse_args(argv)

    cache = Path(args.cache).resolve()
    try:
        cache.relative_to(REPO_ROOT)
        ap.error(f"--cache {cache} is inside the repository; use a directory outside it")
    except ValueError:
        pass

    UPSTREAM.mkdir(parents=True, exist_ok=True)
    prov: Dict[str, object] = {}
    if PROVENANCE.exists():
        prov = json.loads(PROVENANCE.read_text())
    versions_rec: Dict[str, dict] = dict(prov.get("versions", {}))  # type: ignore[arg-type]

    log("fetching PyPI simple index for vllm")
    index = fetch_index("vllm")
    failed = []
    for v in args.versions:
        log(f"vllm=={v}")
        try:
            entry = pick_wheel(index, v)
            wheel = download(entry, cache)
            versions_rec[v] = extract(v, wheel, entry, UPSTREAM)
            if args.delete_wheels:
                wheel.unlink()
        except Exception as exc:  # noqa: BLE001
            log(f"  ERROR: {exc}")
            failed.append(v)
            if not args.keep_going:
                break
        # write after every version so a partial run still leaves usable provenance
        _write_provenance(versions_rec)
    if failed:
        log(f"failed: {failed}")
        return 1
    return 0


def _version_key(v: str):
    parts = []
    for p in v.replace(".post", ".-1.").split("."):
        parts.append(int(p) if p.lstrip("-").isdigit() else 0)
    return parts


def _write_provenance(versions_rec: Dict[str, dict]) -> None:
    ordered = {k: versions_rec[k] for k in sorted(versions_rec, key=_version_key)}
    doc = {
        "source": "PyPI (https://pypi.org/simple/vllm/), manylinux x86_64 wheels",
        "generated_by": "scripts/fetch_fixtures.py",
        "license": "Apache-2.0 (see LICENSE-vllm)",
        "metadata_note": (
            "METADATA files are cut after their header block; sha256 is of the cut file, "
            "original_sha256 of the file in the wheel"
        ),
        "versions": ordered,
    }
    PROVENANCE.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")


if __name__ == "__main__":
    sys.exit(main())
