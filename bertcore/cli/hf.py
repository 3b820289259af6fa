"""``export-hf`` and ``import-hf``: a checkpoint to and from a transformers BERT directory."""
from __future__ import annotations

import os
import sys

from bertcore.cli.common import load_bundle


def cmd_export_hf(args) -> int:
    from bertcore.io.hf_interop import export_hf, export_notes

    if os.path.isfile(os.path.join(os.path.expanduser(args.dir), "classifier.json")):  # a fine-tuned classifier
        from bertcore.finetune.models import load_classifier
        from bertcore.io.hf_interop import export_hf_classifier

        model, tok, _ = load_classifier(args.dir)
        out = export_hf_classifier(model, tok, os.path.expanduser(args.out))
        print(f"wrote a transformers directory to {out} (load it with BertForSequenceClassification.from_pretrained)")
        for note in export_notes(model.config):
            print(f"note: {note}")
        return 0
    from bertcore.io.checkpoint import read_json_object

    b = load_bundle(args.dir)
    out = export_hf(b, os.path.expanduser(args.out))
    arch = (read_json_object(out / "config.json").get("architectures") or ["BertForPreTraining"])[0]
    print(f"wrote a transformers directory to {out} (load it with {arch}.from_pretrained)")
    for note in export_notes(b.model.config, getattr(b.model, "sentence_task", "nsp")):
        print(f"note: {note}")
    return 0


def cmd_import_hf(args) -> int:
    from bertcore.io.checkpoint import save_checkpoint
    from bertcore.io.hf_interop import import_hf

    b = import_hf(os.path.expanduser(args.hf_dir))
    save_checkpoint(b, os.path.expanduser(args.out))
    for note in b.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"saved bertcore checkpoint to {args.out}")
    return 0
