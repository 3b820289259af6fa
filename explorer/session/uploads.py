"""Checkpoint zips: safe extraction of uploads and in-memory zips for download (no streamlit here).

Uploads are extracted only below a directory the caller owns (the session's temp dir), with no absolute or
``..`` paths, no links, at most ``MAX_UPLOAD_UNCOMPRESSED`` bytes unpacked (counted while reading), and no
pickle-style files: weights are loaded only from safetensors by ``bertcore.io.checkpoint.load_checkpoint``.
Each client address loads at most BERTCORE_CLIENT_UPLOADS_PER_MINUTE of them a minute (``explorer.session.client_limits``).
"""
from __future__ import annotations

import io
import shutil
import tempfile
import time
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from bertcore.errors import CheckpointError
from bertcore.io.checkpoint import load_checkpoint, save_checkpoint
from explorer.session import client_limits

MAX_UPLOAD_UNCOMPRESSED = 200 * 1024 * 1024  # bytes, checkpoint zip after extraction
FORBIDDEN_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy")


def safe_extract_zip(data: bytes, dest: Path, max_total: int = MAX_UPLOAD_UNCOMPRESSED) -> Path:
    """Extract an uploaded zip below ``dest`` or raise CheckpointError with the reason.

    Rejects absolute paths and ``..`` components, links, more than ``max_total`` uncompressed
    bytes (counted while reading, so a lying header cannot bomb us), and pickle-like files
    (.bin/.pt/.pkl/...): pickles can run code when loaded and are never loaded here.
    """
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise CheckpointError(f"this file is not a readable zip archive ({e}); upload the zip made by "
                              "'Download checkpoint'") from None
    dest = Path(dest).resolve()
    with zf:
        infos = zf.infolist()
        if len(infos) > 1000:
            raise CheckpointError(f"the zip has {len(infos)} entries; a checkpoint has a handful of files")
        declared = 0
        for info in infos:
            name = info.filename
            p = PurePosixPath(name.replace("\\", "/"))
            if p.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") \
                    or ".." in p.parts:
                raise CheckpointError(f"unsafe path {name!r} in the zip (absolute or '..'); refusing to extract")
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise CheckpointError(f"{name!r} is a symbolic link; refusing to extract")
            if p.suffix.lower() in FORBIDDEN_SUFFIXES:
                raise CheckpointError(
                    f"{name!r} is a pickle-style file ({p.suffix}); pickles can run code and are never loaded. "
                    "Use a checkpoint with model.safetensors")
            declared += info.file_size
        if declared > max_total:
            raise CheckpointError(f"the zip expands to {declared / 1e6:.0f} MB, more than the "
                                  f"{max_total / 1e6:.0f} MB limit for uploads")
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        total = 0
        try:
            for info in infos:
                target = (dest / info.filename).resolve()
                if dest not in target.parents and target != dest:
                    raise CheckpointError(f"unsafe path {info.filename!r} in the zip; refusing to extract")
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    while chunk := src.read(1 << 20):
                        total += len(chunk)
                        if total > max_total:
                            raise CheckpointError(f"the zip expands to more than {max_total / 1e6:.0f} MB "
                                                  "(a zip bomb?); refusing to extract")
                        out.write(chunk)
        except CheckpointError:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        except RuntimeError as e:  # an encrypted member ("password required")
            shutil.rmtree(dest, ignore_errors=True)
            raise CheckpointError(f"the zip cannot be read ({e}); upload an unencrypted zip made by "
                                  "'Download checkpoint'") from None
        except NotImplementedError as e:  # an unknown compression method
            shutil.rmtree(dest, ignore_errors=True)
            raise CheckpointError(f"the zip uses an unsupported compression ({e}); re-zip it with plain "
                                  "deflate") from None
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as e:
            shutil.rmtree(dest, ignore_errors=True)
            raise CheckpointError(f"the zip is damaged ({e}); download the checkpoint again") from None
    # A zip of a folder: use the folder that holds config.json.
    if not (dest / "config.json").exists():
        subs = [c.parent for c in dest.rglob("config.json")]
        if len(subs) == 1:
            return subs[0]
    return dest


def checkpoint_zip_bytes(bundle) -> bytes:
    """save_checkpoint to a temp dir, zipped in memory."""
    with tempfile.TemporaryDirectory(prefix="bertx-save-") as d:
        save_checkpoint(bundle, d)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for f in sorted(Path(d).rglob("*")):
                if f.is_file():
                    zf.write(f, f.relative_to(d).as_posix())
        return buf.getvalue()


def load_checkpoint_zip(data: bytes, tmp_root: Path, name: str = "checkpoint.zip"):
    """Safely extract an uploaded checkpoint zip below ``tmp_root`` and load it (safetensors only).

    Raises BertcoreError subclasses only: ``client_limits.ClientLimited`` when this client has loaded its
    uploads per minute (BERTCORE_CLIENT_UPLOADS_PER_MINUTE), before anything is extracted."""
    client_limits.charge("upload")
    slot = Path(tmp_root) / f"upload-{time.time_ns()}"
    root = safe_extract_zip(data, slot)
    try:
        bundle = load_checkpoint(root)
    except CheckpointError as e:  # say "the zip", not the server's temp path; keep no rejected files
        shutil.rmtree(slot, ignore_errors=True)
        msg = str(e).replace(str(root), "the zip").replace(str(slot), "the zip")
        raise CheckpointError(msg[:1].upper() + msg[1:] if msg.startswith("the zip") else msg) from None
    try:
        bundle.name = Path(name).stem or bundle.name
    except AttributeError:
        pass
    return bundle
